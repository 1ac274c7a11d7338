"""Values placed into Dockerfile text, quoted once for the place they land in.

Every expression a layer template prints (`{{ ... }}`) goes through `Marks`: while the template renders,
the value is replaced by a marker; once the whole Dockerfile is there, a small lexer finds where each
marker stands (a bare shell or Dockerfile word, inside '...', inside "...", inside a JSON-form
instruction, in a comment) and the value is written in the form that is inert there:

| place          | what is written                                                                    |
|----------------|------------------------------------------------------------------------------------|
| word           | as it is when every character is safe (`g++`, `/opt/venv`), else single-quoted (`'a>=1'`) |
| inside '...'   | the value, which must hold no `'`                                                  |
| inside "..."   | the value, which must hold no `"`, `$`, backtick or backslash                      |
| JSON string    | the value, which must be plain words (a JSON-form `RUN ["sh", "-c", ...]` hides a shell) |
| JSON value     | the value as a JSON string                                                         |
| comment        | the value, which must not end in a backslash (it would join the next line to the comment) |
| before the first FROM | nothing: a comment there can be a parser directive (`# escape=`, `# syntax=`) |

A value with a newline or another control character is refused everywhere: it would end the instruction.
A value that cannot be placed where the template puts it is an input error, never a silent rewrite.
What templates print from imagebuilder itself (macro output, the build args' shell expressions) is
`Markup` and passes as it is. Template authors need not quote: `shquote` is kept as a no-op marker.
Pure: no I/O.
"""

from __future__ import annotations

import enum
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

OPEN, CLOSE = "\ue000", "\ue001"  # private-use characters: never in a template or an accepted value
_MARK = re.compile(f"{OPEN}(\\d+){CLOSE}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSAFE = re.compile(r"[^\w@%+=:,./-]", re.ASCII)  # shlex.quote's notion of a character that needs quoting
# Instructions whose shell form runs in a shell (where an unquoted `#` starts a comment), and those that
# take a JSON array.
_SHELL = frozenset({"RUN", "CMD", "ENTRYPOINT"})
_JSON_FORM = frozenset({"RUN", "CMD", "ENTRYPOINT", "SHELL", "COPY", "ADD", "VOLUME"})


class Place(enum.Enum):
    WORD = "a bare word"
    SINGLE = "a '...' string"
    DOUBLE = 'a "..." string'
    JSON_STRING = "a JSON string"
    JSON = "a JSON value"
    COMMENT = "a comment"
    PREAMBLE = "the lines before the first FROM"


class Unquotable(ValueError):
    """A value that cannot be written inertly where the template puts it."""

    def __init__(self, value: str, place: Place, line: int, why: str) -> None:
        shown = value if len(value) <= 60 else value[:57] + "..."
        super().__init__(f"the value {shown!r} cannot be placed in {place.value} (rendered line {line}): {why}")
        self.line = line


def is_word(value: str) -> bool:
    """Whether a value is one shell word as it is (no character a shell or Docker's parser treats specially)."""
    return bool(value) and not _UNSAFE.search(value)


def quote_word(value: str) -> str:
    """A value as one word for a shell and for Docker's own instruction parser (ENV, ARG, LABEL, COPY):
    unchanged when every character is safe, else single-quoted. Newlines and control characters cannot be
    quoted in a Dockerfile (they end the instruction)."""
    if _CONTROL.search(value):
        raise ValueError(f"{value[:60]!r} holds a newline or a control character")
    return value if is_word(value) or not value else shlex.quote(value)


def place(value: str, where: Place, *, json_text: bool = False) -> str:
    """The text that stands for `value` at `where`; `Unquotable` (line 0) when there is none."""
    def refuse(why: str) -> Unquotable:
        return Unquotable(value, where, 0, why)

    if _CONTROL.search(value):
        raise refuse("it holds a newline or a control character, which would end the instruction")
    if where is Place.PREAMBLE:
        raise refuse("a comment there can be read as a parser directive (escape=, syntax=), which changes how "
                     "the whole Dockerfile is read")
    if where is Place.COMMENT:
        if value.rstrip(" \t").endswith("\\"):
            raise refuse("it ends in a backslash, which would join the next line to the comment")
        return value
    if where is Place.WORD:
        return quote_word(value)
    if where is Place.SINGLE:
        if "'" in value:
            raise refuse("it holds a ' that would end the string")
        return value
    if where is Place.DOUBLE:
        bad = sorted({ch for ch in value if ch in '"$`\\'})
        if bad:
            raise refuse(f"it holds {' '.join(bad)}, which a shell expands or which ends the string")
        return value
    if where is Place.JSON:
        return value if json_text else json.dumps(value)
    if not all(is_word(word) for word in value.split(" ") if word):
        raise refuse("a JSON-form instruction may hand its strings to a shell (sh -c); pass such a value "
                     "through ENV instead")
    return json.dumps(value)[1:-1]


@dataclass
class _Printed:
    value: str
    json_text: bool = False  # the value is JSON already (`tojson`)


@dataclass
class Marks:
    """The values one render printed, and the filters that keep each list item a value of its own.
    One instance per Jinja environment (its `finalize`); `begin()` before each render."""

    printed: list[_Printed] = field(default_factory=list)

    def begin(self) -> None:
        self.printed.clear()

    def mark(self, value: Any, *, json_text: bool = False) -> Markup:
        if isinstance(value, Markup):  # imagebuilder's own text: macro output, marks already made
            return value
        self.printed.append(_Printed("" if value is None else str(value), json_text))
        return Markup(f"{OPEN}{len(self.printed) - 1}{CLOSE}")

    def finalize(self, value: Any) -> Any:
        """Jinja's `finalize`: every printed expression becomes a marker."""
        return self.mark(value)

    def join(self, items: Iterable[Any], separator: str = "", attribute: Any = None) -> Markup:
        """`join` that keeps each item a value of its own, so `packages | join(" ")` quotes each package."""
        values = [item[attribute] if attribute is not None else item for item in items]
        return Markup(separator).join(self.mark(v) for v in values)

    def shquote(self, value: Any) -> Markup:
        """Kept for templates written before quoting was automatic: the value is quoted where it lands."""
        return self.mark(value)

    def tojson(self, value: Any, indent: int | None = None) -> Markup:
        return self.mark(json.dumps(value, sort_keys=True, indent=indent), json_text=True)

    def resolve(self, text: str) -> str:
        """The text with every marker replaced by its value, quoted for the place it stands in."""
        spots = places(text)
        out: list[str] = []
        last = 0
        for match in _MARK.finditer(text):
            index = int(match.group(1))
            where, line = spots[match.start()]
            item = self.printed[index]
            try:
                out.append(text[last:match.start()] + place(item.value, where, json_text=item.json_text))
            except Unquotable as exc:
                raise Unquotable(item.value, where, line, str(exc).split(": ", 1)[1]) from None
            last = match.end()
        out.append(text[last:])
        return "".join(out)


def places(text: str) -> dict[int, tuple[Place, int]]:
    """Where each marker of a rendered Dockerfile stands: offset -> (place, line number).

    Docker joins an instruction's lines at a trailing backslash and drops comment lines inside it; in the
    shell form of RUN/CMD/ENTRYPOINT a shell then reads the joined text (quotes, backslash escapes, and an
    unquoted `#` after a blank starting a comment to the end of the instruction); other instructions go
    through Docker's own word parser (the same quotes and escapes, no comments); JSON forms are arrays
    of JSON strings. Before the first FROM nothing may be printed (`Place.PREAMBLE`)."""
    out: dict[int, tuple[Place, int]] = {}
    continuing = seen_from = False
    keyword = ""
    quote: str | None = None
    comment = json_form = in_string = False
    offset = 0
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        start = 0
        if not continuing or stripped.startswith("#"):
            if not stripped or stripped.startswith("#"):
                for match in _MARK.finditer(line):
                    out[offset + match.start()] = (Place.COMMENT if seen_from else Place.PREAMBLE, number)
                offset += len(line) + 1
                continue
            quote, comment, in_string = None, False, False
            head = re.match(r"\s*(\S+)\s*", line)
            assert head is not None
            keyword = _MARK.sub("", head.group(1)).upper()
            seen_from = seen_from or keyword == "FROM"
            json_form = keyword in _JSON_FORM and line[head.end():].startswith("[")
            # a printed value standing as the instruction itself is read as a word
            start = head.start(1) if _MARK.match(line, head.start(1)) else head.end(1)
        i = start
        while i < len(line):
            at = _MARK.match(line, i)
            if at:
                if not seen_from:
                    where = Place.PREAMBLE
                elif comment:
                    where = Place.COMMENT
                elif json_form:
                    where = Place.JSON_STRING if in_string else Place.JSON
                else:
                    where = {None: Place.WORD, "'": Place.SINGLE, '"': Place.DOUBLE}[quote]
                out[offset + i] = (where, number)
                i = at.end()
                continue
            ch = line[i]
            if comment:
                pass
            elif json_form:
                if in_string and ch == "\\":
                    i += 1
                elif ch == '"':
                    in_string = not in_string
            elif quote == "'":
                quote = None if ch == "'" else quote
            elif quote == '"':
                if ch == "\\":
                    i += 1
                elif ch == '"':
                    quote = None
            elif ch == "\\":
                i += 1
            elif ch in "'\"":
                quote = ch
            elif ch == "#" and keyword in _SHELL and (i == 0 or line[i - 1] in " \t"):
                comment = True
            i += 1
        continuing = line.rstrip().endswith("\\")
        offset += len(line) + 1
    return out
