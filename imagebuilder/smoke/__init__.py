"""The smoke suite. `suite.py` runs inside images with their own Python: standard library and torch only."""

from pathlib import Path


def suite_source() -> bytes:
    """The suite's source, to be copied into a container."""
    return (Path(__file__).parent / "suite.py").read_bytes()
