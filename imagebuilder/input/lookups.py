"""What a matrix needs from outside its file, asked after the file was read: the Python of a base image for
which the matrix names none and the OS table (`compat.os_python`) knows none (the engine runs the image), and
which versions of an overriding nccl/cudnn wheel the entry's index has (HTTP).

The loader only reads: a first `matrix.load` says what it would need (`Questions`, on `Matrix.questions`),
this step answers them (`Facts`), and a second `matrix.load` with the facts resolves the entries that needed
them. A matrix that names its Python and overrides nothing asks nothing, and no engine or network is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

BasePython = Callable[[str], "str | None"]  # base image -> its Python, None when unknown
IndexVersions = Callable[[str, str], "list[str] | None"]  # (index url, project) -> versions; None: no such project


@dataclass(frozen=True)
class Questions:
    base_images: frozenset[str] = frozenset()  # base images whose Python the matrix needs
    index: frozenset[tuple[str, str]] = frozenset()  # (index url, project) whose versions an override needs

    def __bool__(self) -> bool:
        return bool(self.base_images or self.index)


@dataclass(frozen=True)
class Facts:
    base_python: Mapping[str, str | None] = field(default_factory=dict)
    index_versions: Mapping[tuple[str, str], list[str] | None] = field(default_factory=dict)
    index_errors: Mapping[tuple[str, str], str] = field(default_factory=dict)  # an index that did not answer


def answer(questions: Questions, *, base_python: BasePython, index_versions: IndexVersions | None) -> Facts:
    """The answers: every base image's Python (asked of the engine), and, unless `index_versions` is None
    (--offline), each index's versions of each project (an index that fails is noted, not fatal)."""
    versions: dict[tuple[str, str], list[str] | None] = {}
    errors: dict[tuple[str, str], str] = {}
    for url, project in sorted(questions.index):
        if index_versions is None:
            break
        try:
            versions[(url, project)] = index_versions(url, project)
        except Exception as exc:  # noqa: BLE001 - an unreachable index only weakens the check
            errors[(url, project)] = str(exc) or type(exc).__name__
    return Facts({image: base_python(image) for image in sorted(questions.base_images)}, versions, errors)
