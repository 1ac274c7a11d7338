"""Flows that are not steps of a run (promote, history, checking or smoking one image): each returns results and
prints nothing; the CLI prints them."""
