"""The smoke suite. `suite.py` runs inside images with their own Python: standard library and torch only."""

from pathlib import Path

SUITE_DATA = ("gpu_peaks.json",)  # the package's data files the suite reads beside itself (its GPU peak table)


def suite_source() -> bytes:
    """The suite's source, to be copied into a container."""
    return (Path(__file__).parent / "suite.py").read_bytes()


def suite_data() -> dict[str, bytes]:
    """The data files the suite reads beside itself (`SUITE_DATA`, from imagebuilder/data/), by file name: copied
    into a container next to the suite wherever the suite is."""
    return {name: (Path(__file__).parent.parent / "data" / name).read_bytes() for name in SUITE_DATA}
