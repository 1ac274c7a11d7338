"""The pip installs of a plan's nodes, held to the lock beside the matrix: what each install asks for, the name the lock
files its wheels under, and the check that the lock covers every one.

A layer template installs Python packages through `macros.j2` (`pip_install`, `torch_install`, `cuda_libs`, the team
layers' included): each call is recorded while the node renders as an `Install` (what it asks: its requirements, the
plan's pins and overrides, the index, the wheelhouse, the Python) and named by `key`: a hash of what it asks and of the
install before it in the node's chain (`after`; none for the chain's first), so one name stands for one resolution
whichever entries share it, and a change anywhere below an install (a parent's wheels, a layer's requirement) names it
anew. The lock (`installs.<key>`) gives each install the exact wheels it adds: name, version, file, source and sha256.

Under the lock a node's installs take only those files: each call installs its own requirements file
(`name==version --hash=sha256:…`, `--no-deps --require-hashes`), so pip itself refuses a file the index now serves
under the same name with other bytes, naming both hashes, and installs nothing the lock does not name.
`plan/wheels.py` checks, when the plan is loaded, that the lock pins every install the plan's nodes make; what an
install resolves to is the lock command's to ask (`ports/resolver.py`). A layer's own install command (`raw_installs`:
pip in any spelling, uv's pip, conda and its kin, outside the recorded installs) cannot be pinned, so under the lock it
is refused there too. This module reads no index and no file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shlex
from dataclasses import dataclass

from ..input.lock import LockedInstall

# The platform installs are resolved for: the wheels' tags pip accepts in a glibc image of x86-64 (the base images
# imagebuilder supports are glibc 2.28 or later: Debian 10+, Ubuntu 20.04+, UBI 8+).
PLATFORM = "x86_64-manylinux_2_28"
WHEELHOUSE_SOURCE = "wheelhouse"  # a locked wheel's `source` when it came from the entry's wheelhouse (pinned there)
KINDS = ("venv", "target")  # into the entry's venv (its pins as constraints); into a --target folder (CUDA libraries)


@dataclass(frozen=True)
class Install:
    """One pip install a node's template makes: its `kind`, the requirements it names, the pins that constrain it
    (`constraints`), the versions it installs over torch's own pins (`overrides`), the index (`index`: the URL as the
    matrix gives it) and the wheelhouse it takes wheels from (the lock's name for it, or None), for the entry's Python;
    `after`: the key of the install before it in the node's chain (None: the first). `key`: its name in the lock."""

    kind: str
    requirements: tuple[str, ...]
    index: str
    python: str
    constraints: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    wheelhouse: str | None = None
    after: str | None = None

    @property
    def key(self) -> str:
        asked = {"kind": self.kind, "requirements": list(self.requirements), "index": self.index,
                 "python": self.python, "constraints": list(self.constraints), "overrides": list(self.overrides),
                 "wheelhouse": self.wheelhouse, "after": self.after, "platform": PLATFORM}
        return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]

    def said(self) -> str:
        """The install in a line: its requirements and index."""
        reqs = ", ".join(self.requirements[:4]) + (f" and {len(self.requirements) - 4} more"
                                                   if len(self.requirements) > 4 else "")
        return f"pip install {reqs} from {self.index}"


def file_text(locked: LockedInstall) -> str:
    """The requirements file an install takes under the lock: each wheel it adds, pinned by version and hash."""
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in locked.wheels)


# The shell commands that install packages the lock cannot see (outside `macros.j2`'s recorded installs): pip in any
# spelling, `python -m pip`, uv's pip interface, conda and its kin, easy_install. One that checks hashes itself
# (`--require-hashes`: pip and uv refuse any file whose hash a requirements file does not give) is pinned by them.
_PIP = re.compile(r"pip(\d+(\.\d+)?)?")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_CONDA = ("conda", "mamba", "micromamba")
_SHELLS = ("sh", "bash", "dash", "zsh")
_PREFIXES = ("sudo", "env", "exec", "time", "nice", "nohup", "command", "do", "then", "else", "elif", "if",
             "while", "until", "!", "{", "(")
_INSTRUCTION = re.compile(r"\s*RUN\s", re.IGNORECASE)
_FLAGS = re.compile(r"^(--[a-z-]+=\S+\s+)+")
_HEREDOC = re.compile(r"(?<![<\S])<<-?[\"']?([A-Za-z_][\w.-]*)[\"']?")  # a word starting `<<` (not `<<<`)


@dataclass(frozen=True)
class RawInstall:
    """A shell command of a rendered Dockerfile that installs packages outside the lock: the line its RUN
    instruction starts on (1-based), that line's text and the command."""

    line: int
    text: str
    command: str


def raw_installs(dockerfile: str) -> tuple[RawInstall, ...]:
    """Each command of the Dockerfile's RUN instructions (shell form, exec form, continuation lines and heredocs;
    `sh -c '…'` read inside) that installs packages by a means the lock does not pin (above)."""
    found: list[RawInstall] = []
    for line, text, body in _runs(dockerfile):
        found.extend(RawInstall(line, text, command) for command in _installers(body))
    return tuple(found)


def _runs(dockerfile: str) -> list[tuple[int, str, str]]:
    """(first line, its text, the instruction's shell text) of each RUN instruction: `\\` continuations joined,
    comment lines inside them dropped, heredoc bodies (`<<EOF` … `EOF`) appended."""
    lines = dockerfile.splitlines()
    runs: list[tuple[int, str, str]] = []
    i = 0
    while i < len(lines):
        start, first = i, lines[i]
        parts = [first]
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            if not lines[i].lstrip().startswith("#"):
                parts.append(lines[i])
        i += 1
        if not _INSTRUCTION.match(first):
            continue
        text = " ".join(p.rstrip().removesuffix("\\") for p in parts)
        body = _FLAGS.sub("", _INSTRUCTION.sub("", text, count=1).strip())  # (RUN --mount=… --network=… first)
        for word in _HEREDOC.findall(body):  # heredocs, in order
            heredoc = []
            while i < len(lines) and lines[i].strip() != word:
                heredoc.append(lines[i])
                i += 1
            i += 1
            body += "\n" + "\n".join(heredoc)
        if body.startswith("["):  # exec form: the argument list
            with contextlib.suppress(ValueError):
                body = " ".join(shlex.quote(str(a)) for a in json.loads(body))
        runs.append((start + 1, first.strip(), body))
    return runs


def _installers(script: str, depth: int = 0) -> list[str]:
    lines = (line for line in script.replace("\\\n", " ").splitlines() if not line.lstrip().startswith("#"))
    script = " ; ".join(re.sub(r"(^|\s)#.*", "", line) for line in lines)  # (its lines are commands of their own)
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lexer.commenters = ""  # (comments are gone; a `#` inside a word is the word's: `${V#v}`, `http://x/#y`)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # (an unbalanced quote: read as words)
        words = script.split()
    found: list[str] = []
    command: list[str] = []
    for word in [*words, ";"]:
        if word and set(word) <= set(";&|()"):
            command = _simple(command)
            if command and _installs(command, depth, found):
                found.append(" ".join(command))
            command = []
        else:
            command.append(word)
    return found


def _simple(words: list[str]) -> list[str]:
    """A command's words from its program on: keywords, wrappers and variable assignments before it dropped."""
    while words and (words[0] in _PREFIXES or re.fullmatch(r"\w+=\S*", words[0])):
        words = words[1:]
    return words


def _installs(words: list[str], depth: int, found: list[str]) -> bool:
    """Whether this simple command installs outside the lock (a shell's `-c` script is read in `found`'s stead)."""
    program, args = words[0].rsplit("/", 1)[-1], [w for w in words[1:] if not w.startswith("-")]
    flag = next((i for i, w in enumerate(words[1:], 1) if re.fullmatch(r"-[a-z]*c[a-z]*", w)), None)
    if program in _SHELLS and flag is not None and depth < 3:  # (`sh -c`, `bash -lc`, `sh -ec`: its script)
        found.extend(_installers(words[flag + 1] if flag + 1 < len(words) else "", depth + 1))
        return False
    hashed = "--require-hashes" in words
    if _PIP.fullmatch(program):
        return args[:1] == ["install"] and not hashed
    if _PYTHON.fullmatch(program) and "-m" in words:
        module = words[words.index("-m") + 1:]
        return module[:1] == ["pip"] and [w for w in module[1:] if not w.startswith("-")][:1] == ["install"] \
            and not hashed
    if program == "uv":
        return args[:2] in (["pip", "install"], ["pip", "sync"]) and not hashed
    if program in _CONDA:
        return args[:1] in (["install"], ["create"], ["update"])
    return program == "easy_install"
