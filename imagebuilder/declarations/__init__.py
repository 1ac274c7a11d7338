"""The declarations: what a matrix may say, declared once and read by every package (the ground floor): each key
with its default and bounds (`schema`) and the grammar of every value (`grammar`). Pure; they import nothing of the
package but `secrets.redact` (which query parameter carries a credential), which imports nothing back."""
