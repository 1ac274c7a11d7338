"""The reference pages under docs/reference/ are made from the code (`imagebuilder/manual.py`): a committed page
that differs from what the code makes now fails here, naming the command that rewrites it. The help that the
pages print is true: the `--expect` a step takes offers only what the step accepts."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest

from imagebuilder import manual
from imagebuilder.declarations import schema
from imagebuilder.errors import InputError
from imagebuilder.evidence import spec

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(manual.pages(ROOT)))
def test_a_committed_reference_page_is_what_the_code_makes(name: str) -> None:
    committed = (REFERENCE / name).read_text(encoding="utf-8") if (REFERENCE / name).is_file() else ""
    assert committed == manual.pages(ROOT)[name], f"docs/reference/{name} drifted from the code: run `make reference`"


def test_drift_is_seen_when_the_code_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above, seen failing: the committed pages, then a schema with one more key."""
    for name, text in manual.pages(ROOT).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert manual.drift(ROOT, tmp_path) == []
    monkeypatch.setattr(schema, "KEYS", (*schema.KEYS, schema.Key("smoke.new_key", "int", "A new key.", "3")))
    assert manual.drift(ROOT, tmp_path) == ["matrix-keys.md"]
    (tmp_path / "smoke-checks.md").write_text("edited by hand\n", encoding="utf-8")
    assert manual.drift(ROOT, tmp_path) == ["matrix-keys.md", "smoke-checks.md"]


def test_a_report_field_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """report.json's documentation is the comment on each NodeRecord field's line: a field without one fails."""
    monkeypatch.setattr(manual, "_field_comments", lambda cls: {})
    with pytest.raises(ValueError, match=r"report\.json fields with no description: node, entry"):
        manual.report_page()


def test_every_command_is_in_the_reference() -> None:
    from imagebuilder.cli import cli

    page = manual.pages(ROOT)["commands.md"]
    for path, _ in manual._walk(cli, ("imagebuilder",)):
        if len(path) > 1:
            assert f"## `{' '.join(path)}`" in page
    assert "| 2 |" in page and "`InputError`" in page and "| 130 |" in page


def _examples(help_text: str) -> list[str]:
    return re.findall(r"\b([a-z_]+)=", help_text)


@pytest.mark.parametrize("command", ["build", "verify"])
def test_the_expect_help_offers_only_what_the_step_accepts(command: str) -> None:
    """`--expect` of the steps may only raise floors: its help offered `nccl=...`, which Specs refuses."""
    from imagebuilder.cli import cli

    assert isinstance(cli, click.Group)
    (option,) = [p for p in cli.commands[command].params if p.name == "expect"]
    offered = {*(_examples(option.help or "")), *re.findall(r"[a-z]+(?:_[a-z]+)+", option.help or "")}
    assert offered, "the help names no key"
    for key in offered:
        assert key in spec.FLOORS, f"{command} --expect help offers {key}, which the step refuses"
    plan = dataclasses.make_dataclass("P", [("entries", object)])(lambda: [])
    with pytest.raises(InputError, match="only floors may be given"):
        spec.Specs(plan, (("nccl", "2.21.5"),))  # type: ignore[arg-type]
