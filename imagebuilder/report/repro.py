"""The commands that reproduce what went wrong with one node of a report, every value shell-quoted: the failed
smoke checks in its very image (by digest, after a pull, when it is in a registry), and the step that failed,
again from the matrix, for this node alone."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..smoke.runner import check_kind


def commands(node: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[str, ...]:
    """`node` and `meta` as report.json has them (the command that ran, its matrix and --registry)."""
    status = str(node.get("status"))
    command = str(meta.get("command") or "build")
    registry = meta.get("registry")
    base = ["--matrix", str(meta.get("matrix") or "matrix.yaml"), *(["--registry", str(registry)] if registry else []),
            "--only", str(node.get("node"))]
    if node.get("publish") == "failed":  # the push or the tags: again, with the push (a dry run first)
        step = "publish" if command == "publish" else command
        return (shlex.join(["imagebuilder", step, *base, *(["--dry-run"] if step == "publish" else [])]),)
    if status == "smoke failed":
        checks = node.get("smoke_report", {}).get("checks", []) if isinstance(node.get("smoke_report"), Mapping) \
            else []
        kinds = sorted({k for c in _maps(checks) if c.get("status") == "fail"
                        and (k := check_kind(str(c.get("name")))) is not None})
        digest, repo = node.get("digest"), node.get("repository")
        ref = f"{repo}@{digest}" if digest and repo else str(node.get("image") or "")
        out = []
        if ref and kinds:
            if digest and repo:
                out.append(shlex.join(["docker", "pull", ref]))
            out.append(shlex.join(["imagebuilder", "smoke", ref, "--only", ",".join(kinds)]))
        again = ["verify", *base, "--resmoke"] if command == "verify" else ["build", *base, "--resmoke", "--no-push"]
        return (*out, shlex.join(["imagebuilder", *again]))  # from the matrix: the suite and the performance gate
    if status in ("failed", "interrupted", "cancelled"):
        return (shlex.join(["imagebuilder", command, *base, *(["--no-push"] if command == "build" else [])]),)
    if status == "held":
        return (shlex.join(["imagebuilder", command, *base, *(["--dry-run"] if command == "publish" else [])]),)
    return ()


def _maps(items: Any) -> list[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, Sequence) else []
