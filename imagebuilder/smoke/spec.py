"""The spec: everything the smoke suite is told about a node's image, as one frozen value: what it expects (the
versions, floors, user and overrides the suite checks), how its container gets the GPUs (`gpus`, `driver_dir`),
its /dev/shm, the environment `smoke.env` adds, the layer checks it runs and the skips a GPU run accepts.
`evidence.spec.Specs` makes it from the plan; the runner, a verify pod's files and the judge read it. Its JSON form
(`to_json`) is for the edges only: the spec key a pass names (`evidence.passes.spec_key`), the files a verify pod's
suite reads. `expect` and `commands` are the suite's own documents (it is a standalone file): plain mappings, read
by the suite and the judge. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spec:
    """What the suite is told for one node; its JSON form is what a pass's spec key hashes, key for key."""

    expect: Mapping[str, Any]  # what the suite checks (versions, floors, user, overrides), as it reads it
    gpus: str  # how GPUs reach the container: auto | all | cdi | devices | none (`smoke.gpus`)
    driver_dir: str  # with `gpus: devices`: the host's driver folder
    shm_size: str
    env: tuple[tuple[str, str], ...] = ()  # `smoke.env`: what the suite's container gets besides the host's
    commands: tuple[Mapping[str, str], ...] = ()  # the layer checks (`name`, `run`), inherited down the tree
    allow_skip: tuple[str, ...] = ()  # checks (names or globs) whose skip a GPU run accepts

    def raised(self, floors: Mapping[str, float]) -> Spec:
        """This spec with `floors` over its expectations (what `--expect` tells the suite)."""
        return dataclasses.replace(self, expect={**self.expect, **floors})

    def to_json(self) -> dict[str, Any]:
        """The spec as a document: what its key hashes, so that a pass recorded before this type names it still."""
        return {"expect": dict(self.expect), "gpus": self.gpus, "driver_dir": self.driver_dir,
                "shm_size": self.shm_size, "env": dict(self.env), "commands": [dict(c) for c in self.commands],
                "allow_skip": list(self.allow_skip)}
