"""Flows that are not steps of a run (promote, history, an image's SBOM, smoking one image, the compatibility
table, plan's machine formats): each returns results and prints nothing; the CLI prints them."""
