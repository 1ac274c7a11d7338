"""The secret scan of a run's images (`secrets.scan.Scanner`) on a fake engine: where a known secret shows up
(environment, labels, history, the files of the image's own layers, and only those), each image once per run,
an image known only by its registry config, and a layer that cannot be read said as such."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from imagebuilder.errors import EngineError
from imagebuilder.secrets.scan import Scanner

SECRET = "hf_0123456789abcdefghij"
SECRETS = {"$HF_TOKEN": SECRET}


@dataclass
class Layered:
    """Images of stacked layers; each layer holds files. `layer_files(image, top)` reads the top `top` layers."""

    images: dict[str, dict[str, Any]]
    files: dict[str, list[tuple[str, bytes]]]  # layer -> its files
    read: list[tuple[str, int]] = field(default_factory=list)
    broken: bool = False

    def inspect(self, ref: str) -> dict[str, Any]:
        return self.images[ref]

    def image_id(self, ref: str) -> str | None:
        return ref if ref in self.images else None

    def history(self, image: str) -> list[dict[str, Any]]:
        return list(self.images[image].get("history") or [])

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]:
        self.read.append((image, top))
        if self.broken:
            raise EngineError("layer folder not found")
        layers = self.images[image]["RootFS"]["Layers"]
        for layer in layers[len(layers) - top:]:
            for path, data in self.files.get(layer, []):
                yield path, len(data), io.BytesIO(data)


def image(layers: list[str], env: list[str] | None = None, labels: dict[str, str] | None = None,
          history: list[str] | None = None, parent: str = "") -> dict[str, Any]:
    return {"Config": {"Env": env or [], "Labels": {"org.opencontainers.image.base.digest": parent, **(labels or {})}},
            "RootFS": {"Layers": layers}, "history": [{"CreatedBy": h} for h in history or []]}


def engine() -> Layered:
    return Layered(images={"base": image(["l1"]),
                           "child": image(["l1", "l2"], parent="base"),
                           "leaky": image(["l1", "l2"], env=[f"HF_TOKEN={SECRET}"], labels={"note": f"t={SECRET}"},
                                          history=[f"RUN echo {SECRET} > /x"], parent="base")},
                   files={"l1": [("/base/.env", f"HF_TOKEN={SECRET}\n".encode())],
                          "l2": [("/app/config.py", b"print('hello')\n")]})


def test_a_secret_is_found_in_the_environment_labels_and_history_never_said() -> None:
    found = Scanner(SECRETS).image(engine(), "leaky")
    assert len(found.found) == 3 and all(SECRET not in f for f in found.found)
    assert {f.split("image's ", 1)[1].split(" ", 1)[0] for f in found.found} == {"environment", "label", "history"}


def test_only_the_layers_above_the_parent_are_read() -> None:
    """The base layer's .env is the parent's business (scanned when the parent was built), not the child's."""
    fake = engine()
    found = Scanner(SECRETS).image(fake, "child")
    assert fake.read == [("child", 1)] and found.found == () and found.covered.startswith("1 files")
    fake.files["l2"].append(("/app/.env", f"HF_TOKEN={SECRET}\n".encode()))
    again = Scanner(SECRETS).image(fake, "child", parent="base")
    assert "$HF_TOKEN appears in the file /app/.env" in again.found
    assert Scanner(SECRETS).image(fake, "base").found  # the base image itself, read whole


def test_each_image_is_scanned_once_per_run() -> None:
    fake, scanner = engine(), Scanner(SECRETS)
    first = scanner.image(fake, "child")
    assert scanner.image(fake, "child") is first and len(fake.read) == 1


def test_a_layer_that_cannot_be_read_is_a_finding() -> None:
    fake = engine()
    fake.broken = True
    assert Scanner(SECRETS).image(fake, "child").found == (
        "its layers could not be scanned (layer folder not found)",)


def test_an_image_only_in_the_registry_is_scanned_by_its_config() -> None:
    config = {"config": {"Env": [f"TOKEN={SECRET}"], "Labels": {}}, "history": [{"created_by": "RUN true"}]}
    found = Scanner(SECRETS).config(config)
    assert found.found == ("$HF_TOKEN appears in the image's environment (TOKEN)",)
    assert found.covered == "configuration only (the image is only in the registry)"
    assert Scanner(SECRETS).config({"config": {"Env": ["PATH=/usr/bin"]}}).found == ()
