"""report.json: the document every other view of a run is made from (one object per node of the ledger)."""

from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import InputError
from ..ledger import NodeRecord


def node_json(r: NodeRecord) -> dict[str, Any]:
    """One node of report.json."""
    return {
        "node": r.node, "entry": r.entry, "layer": r.layer, "leaf": r.leaf,
        "key": r.key, "reason": r.reason, "cache": r.cache, "same_as": r.same_as, "versions": dict(r.versions),
        "repository": r.repository,
        "status": r.outcome(), "ok": r.ok,
        "build": status_word(r.build), "smoke": status_word(r.verify), "publish": status_word(r.publish),
        "image": r.image, "digest": r.digest, "tags": list(r.tags), "aliases": list(r.aliases),
        "aliases_held": list(r.aliases_held), "error": r.error,
        "log": r.log, "log_tail": r.log_tail, "durations": {k: round(v, 3) for k, v in r.durations.items()},
        "gpu_verified": r.gpu_verified, "base": dict(r.base) if r.base is not None else None, "signed": r.signed,
        "secret_scan": r.secret_scan,
        "pass_record": r.pass_record, "signer": r.signer,
        "gpu": dict(r.record.gpu) if r.record is not None else None,
        "untested": r.untested, "allowed_skips": list(r.allowed_skips),
        "smoke_report": dict(r.smoke_report) if r.smoke_report is not None else None,
        "performance": dict(r.performance) if r.performance is not None else None,
        "sbom": dict(r.sbom) if r.sbom is not None else None,
        "vulnerabilities": dict(r.vulnerabilities) if r.vulnerabilities is not None else None,
    }


def log_link(log: Any) -> str | None:
    """The link from a report folder's pages to a node's log: `logs/<file>` (quoted), where every run writes it,
    whatever folder the run named and wherever the folder is now; None for anything else (a report.json that
    names a log elsewhere, or a URL, links nowhere)."""
    if not isinstance(log, str) or not log or (urlsplit(log).scheme and not re.match(r"[A-Za-z]:[\\/]", log)):
        return None
    path = PurePath(log)
    return f"logs/{quote(path.name)}" if path.parent.name == "logs" and path.name not in ("", ".", "..") else None


def status_word(s: Enum | None) -> str | None:
    """A step's status as report.json writes it."""
    return str(s.value) if s else None


def write_json(results: list[NodeRecord], path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """report.json; the document written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "ok": all(r.ok for r in results), "nodes": [node_json(r) for r in results]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return payload


def load(folder: Path) -> dict[str, Any]:
    """A report folder's report.json, checked enough for the views to read it; an input error naming the file
    and what is wrong otherwise."""
    path = folder / "report.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", hint="give the folder a run wrote its reports to (--report)") \
            from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError(f"{path}: not an imagebuilder report (no `nodes` list)")
    for i, node in enumerate(doc["nodes"]):
        missing = [k for k in REQUIRED if not isinstance(node, dict) or not isinstance(node.get(k), str)]
        if missing:
            raise InputError(f"{path}: nodes[{i}] has no {missing[0]!r} (a string)")
    return doc


REQUIRED = ("node", "entry", "layer", "status")  # what every view needs of a node
