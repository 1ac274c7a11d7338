"""The declarations: what a matrix may say, declared once and read by every package (the ground floor): each key
with its default and bounds (`schema`), the grammar of every value (`grammar`) and the vulnerability policy a matrix
declares (`vulnerabilities`: `Policy`, `Allowance`). Pure; they import nothing of the package but `errors` and
`secrets.redact` (which query parameter carries a credential), neither of which imports anything back."""
