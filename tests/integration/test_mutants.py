"""Mutation tests of the smoke suite on the real engine (issue 16): every CPU mutant of
tests/mutants/mutants.yaml is built as a thin layer on the session chain's task image, and `imagebuilder smoke
IMAGE` (expectations from the image's own labels, only the check kinds that matter) must fail on the check the
mutant names. Mutation score 100 %: one test per mutant. The chain's own full-suite pass is the clean control."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from imagebuilder.ports.engine import DockerEngine

from ..mutants import image as mutants
from .conftest import SESSION, Chain

CPU = mutants.load("cpu")


@pytest.fixture(scope="module")
def clean(engine: DockerEngine, cpu_chain: Chain) -> Iterator[str]:
    """The chain's task image (it passed the whole suite); the mutants built on it are removed afterwards."""
    built: list[str] = []
    yield cpu_chain.image(engine, "task")
    for image in built:
        engine.remove_image(image)


@pytest.mark.parametrize("mutant", CPU, ids=[m.name for m in CPU])
def test_the_suite_catches_the_mutant_on_its_named_check(engine: DockerEngine, clean: str,
                                                         mutant: mutants.Mutant) -> None:
    image = mutants.build(engine, clean, mutant)
    try:
        outcome = mutants.judge(mutant, "cpu", image)
    finally:
        engine.remove_image(image)
    assert outcome.caught, outcome.row()
    assert engine.managed_containers(SESSION) == []  # the hang's container too was removed


def test_the_mutants_cover_every_kind_of_breakage_the_issue_names() -> None:
    names = {m.name for m in mutants.load()}
    for wanted in ("grad_zero", "grad_half", "compile_noop", "nccl_shadow", "cuda_lib_missing", "torch_version",
                   "shm_small", "root_user", "slow_matmul", "failing_layer_check", "hang"):
        assert wanted in names
    assert len(CPU) >= 10
