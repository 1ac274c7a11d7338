"""The supply chain: what is in an image (its SBOM) and what is known to be wrong with it (the vulnerability gate)."""
