"""Tag templates -> image references, validated at plan time.

A template is a Python format string over the entry's resolved fields, e.g.
`{torch}-{accelerator}-py{python}-{flavor}-{layer}`. Unknown fields, characters Docker does not
allow in a tag, tags over 128 characters and the same tag for two nodes are all input errors.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from ..errors import InputError, Where, did_you_mean
from ..ports.reference import Reference

TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
KEY_PENDING = "k3y12pending"  # stands for {key12} until keys are computed (12 characters, like the key)


def fields(versions: Mapping[str, str | None], *, entry: str, layer: str, node: str, date: str = "") \
        -> dict[str, str]:
    """The fields a tag template may use. Missing versions (cpu's cuda, ...) read as 'none'. `{key12}` is the
    node's content key (filled in once keys are known); `{date}` the run's UTC date, yyyymmdd."""
    out = {k: (v if v is not None else "none") for k, v in versions.items()}
    torch_parts = (versions.get("torch") or "").split(".")
    out["torch_minor"] = ".".join(torch_parts[:2])
    cudnn = versions.get("cudnn")
    out["cudnn_major"] = f"cudnn{cudnn.split('.')[0]}" if cudnn else "none"
    out.update(entry=entry, layer=layer, node=node, key12=KEY_PENDING, date=date or "nodate")
    return out


def render(template: str, values: Mapping[str, str], where: Where | None = None) -> str:
    """Fill one template; the result must be a valid Docker tag."""
    try:
        names = [name for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise InputError(f"tag template {template!r} is malformed: {exc}", where=where) from None
    for name in names:
        if name not in values:
            hint = did_you_mean(name, values) or f"known fields: {', '.join(sorted(values))}"
            raise InputError(f"tag template {template!r} uses unknown field {{{name}}}", where=where, hint=hint)
    tag = template.format_map(dict(values))
    if len(tag) > 128:
        raise InputError(f"tag {tag!r} is {len(tag)} characters; Docker allows 128", where=where)
    if not TAG_RE.fullmatch(tag):
        raise InputError(f"tag {tag!r} (from template {template!r}) has characters Docker does not allow "
                         "in a tag", where=where, hint="use letters, digits, '_', '.' and '-'; no leading '.' or '-'")
    return tag


def reference(target: Reference, tag: str) -> str:
    """The image reference of `tag` in an entry's repository (`Entry.target`)."""
    return f"{target.name}:{tag}"
