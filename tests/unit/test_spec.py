"""The spec (`smoke.spec.Spec`) is a frozen value from the plan (`evidence.spec.Specs`) to the judge; its JSON form is
what a pass's spec key hashes, and that hash is pinned: records signed before the spec had a type name the same spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuilder.evidence import passes
from imagebuilder.evidence.spec import Specs
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.render import Renderer
from imagebuilder.smoke.spec import Spec

# A task layer's spec as `Specs.of` made it while it was a dict (this document, byte for byte), and its key with the
# suite's source and the judge's rules held still: computed by the code before the spec had a type.
KNOWN = {"allow_skip": ["fsdp.*"], "commands": [{"name": "layer.task.0", "run": "python /opt/task/evaluate.py --tiny"}],
         "driver_dir": "/usr/local/nvidia", "env": {"NCCL_DEBUG": "WARN"},
         "expect": {"accelerator": "cpu", "cpu_gflops_floor": 20.0, "cuda": None, "cudnn": None, "driver_floor": None,
                    "flavor": "runtime", "nccl": None, "python": "3.11", "throughput_floor": 0.5, "torch": "2.6.0",
                    "torchaudio": "2.6.0", "torchvision": "0.21.0", "triton": None,
                    "user": {"gid": 1000, "home": "/home/ml", "uid": 1000}},
         "gpus": "auto", "shm_size": "2g"}
KNOWN_KEY = "1a8e6c10db6addb589cfa11b919cae7ad0c90cb6dc869c68ded3648b79f0c51d"


@pytest.fixture
def still(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's source and the judge's rules held still (they are part of every key, and change on purpose)."""
    monkeypatch.setattr(passes, "suite_hash", lambda: "suite")
    monkeypatch.setattr(passes, "rules", lambda: "rules")


def test_the_key_of_a_known_spec_is_the_one_it_had_as_a_dict(still: None) -> None:
    spec = Spec(KNOWN["expect"], "auto", "/usr/local/nvidia", "2g", (("NCCL_DEBUG", "WARN"),),
                ({"name": "layer.task.0", "run": "python /opt/task/evaluate.py --tiny"},), ("fsdp.*",))
    assert passes.spec_key(KNOWN) == KNOWN_KEY  # the dict, hashed as before
    assert spec.to_json() == KNOWN and passes.spec_key(spec.to_json()) == KNOWN_KEY  # the type, hashed the same


def test_the_plan_makes_that_spec_and_its_key(tmp_path: Path, still: None) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base_image: debian:bookworm\nregistry: r:5000\nrepository: p\n"
                    "layers:\n  - base\n  - {name: task, parent: base, layer: task}\n"
                    "smoke: {throughput_floor: 0.5, cpu_gflops_floor: 20, env: {NCCL_DEBUG: WARN}, "
                    "allow_skip: [fsdp.*]}\n"
                    "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    plan = plan_mod.make(matrix_mod.load(path, CompatTable.load(None), env={}), Renderer())
    node = next(n for n in plan.nodes if n.name == "task")
    specs = Specs(plan, (("throughput_floor", "0.7"),))
    assert isinstance(specs.of(node), Spec) and specs.of(node).to_json() == KNOWN
    assert specs.key(node) == KNOWN_KEY
    told = specs.told(node)  # --expect raises a floor the suite is told; the spec a pass names stays the matrix's
    assert told.expect["throughput_floor"] == 0.7 and told.to_json() == {**KNOWN, "expect": {**KNOWN["expect"],
                                                                                          "throughput_floor": 0.7}}
    with pytest.raises(AttributeError):
        told.gpus = "none"  # type: ignore[misc]
