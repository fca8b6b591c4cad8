"""What the server runs for a script: its file and the includes it names, as one text.

A script's header names the includes whose functions its body calls, in one line of a fixed
shape, ``-- Includes: events, lanes`` (sorted, or ``none``); an include in ``lua/includes/``
names the includes it calls in the same line of its own header. :func:`compose` builds
``#!lua``, the script's header, every include it needs once (an include's own needs before it),
then the script's body, and keeps a line map, so the line ``user_script:<N>`` of an error reply
can be told as the script's own line, ``claim.lua:135``, or an include's,
``includes/lanes.lua:40`` (:func:`located`).

A script that joins other transitions in one step names them in one line right before its
``-- Includes:`` line, ``-- Runs: complete, claim`` (:func:`runs_of`): each named script's body
is composed, after the includes, as ``local function run_<name>(KEYS, ARGV)`` (its own
``KEYS`` and ``ARGV``, its ``return`` the function's), with the includes it names, so the
joined step runs exactly the code of its parts and a part never drifts from its own script.

A script that may run while the server is at ``maxmemory`` says so in its header, in one line
right before its ``-- Includes:`` line, ``-- Flags: allow-oom`` (:func:`flags_of`); it is then
composed twice, identical but for line 1: ``#!lua``, sent first (the server refuses it whole
when it is out of memory, as every other script) and ``#!lua flags=allow-oom``, the shape
:mod:`emq.lua.scripts` sends after that refusal (:func:`shebang`).

Pure: the loader (:mod:`emq.lua.scripts`) reads the files; this module only puts text together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SHEBANG = "#!lua\n"  # line 1 of every script: the server refuses it whole while out of memory
INCLUDES = "-- Includes:"
FLAGS = "-- Flags:"
RUNS = "-- Runs:"
ALLOW_OOM = "allow-oom"  # runs at maxmemory: the script must then append nothing (scripts.py)
KNOWN_FLAGS = (ALLOW_OOM,)
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_USER_SCRIPT = re.compile(r"user_script:(\d+)")


@dataclass(frozen=True, slots=True)
class Include:
    """One file of ``lua/includes/``: its text and the includes it calls."""

    name: str
    text: str
    needs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Span:
    """Lines ``first..last`` of a composed text are lines ``start..`` of ``file``."""

    first: int
    last: int
    file: str  # "claim.lua", "includes/lanes.lua"
    start: int


@dataclass(frozen=True, slots=True)
class Composed:
    source: str  # what is hashed and sent
    spans: tuple[Span, ...]
    includes: tuple[str, ...]  # composed in this order, each once


def _leading_comments(text: str) -> list[str]:
    lines = text.splitlines()
    n = next((i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return lines[:n]


def includes_of(file: str, text: str) -> tuple[str, ...]:
    """The names on the ``-- Includes:`` line of a file's leading comment block; ValueError
    unless there is exactly one such line, reading ``none`` or names sorted, each once."""
    found = [line for line in _leading_comments(text) if line.startswith(INCLUDES)]
    if len(found) != 1:
        raise ValueError(f"{file}: the header needs one line '{INCLUDES} <names> | none'")
    value = found[0][len(INCLUDES) :].strip()
    if value == "none":
        return ()
    names = tuple(value.split(", "))
    if not all(_NAME.fullmatch(n) for n in names) or list(names) != sorted(set(names)):
        raise ValueError(f"{file}: '{found[0]}' must name includes sorted, once each, by ', '")
    return names


def flags_of(file: str, text: str) -> tuple[str, ...]:
    """The server flags on the ``-- Flags:`` line of a file's leading comment block, () when
    it has none; ValueError for a second such line or a flag emq does not use. Only
    ``allow-oom``: every emq script writes (no ``no-writes``), runs on a primary (no
    ``allow-stale``), in its queue's slot (no ``allow-cross-slot-keys``, so a cluster still
    refuses a key of another slot), on a cluster too (no ``no-cluster``)."""
    found = [line for line in _leading_comments(text) if line.startswith(FLAGS)]
    if not found:
        return ()
    names = tuple(found[0][len(FLAGS) :].strip().split(", "))
    if len(found) > 1 or any(n not in KNOWN_FLAGS for n in names) or len(set(names)) < len(names):
        raise ValueError(
            f"{file}: the header may have one line '{FLAGS} {', '.join(KNOWN_FLAGS)}'"
            f", got {found!r}"
        )
    return names


def runs_of(file: str, text: str) -> tuple[str, ...]:
    """The scripts on the ``-- Runs:`` line of a file's leading comment block, () when it has
    none; ValueError for a second such line or a name that breaks the grammar."""
    found = [line for line in _leading_comments(text) if line.startswith(RUNS)]
    if not found:
        return ()
    names = tuple(found[0][len(RUNS) :].strip().split(", "))
    if len(found) > 1 or not all(_NAME.fullmatch(n) for n in names) or len(set(names)) < len(names):
        raise ValueError(f"{file}: the header may have one line '{RUNS} <script>, <script>'")
    return names


def shebang(flags: Iterable[str] = ()) -> str:
    """Line 1 of a composed script: ``#!lua``, with ``flags=...`` when it has some."""
    names = ",".join(flags)
    return f"#!lua flags={names}\n" if names else SHEBANG


def library(texts: Mapping[str, str]) -> dict[str, Include]:
    """The includes from their texts (``{name: text of includes/<name>.lua}``); ValueError if
    one names an include that does not exist or needs itself, directly or not."""
    lib = {}
    for name, text in texts.items():
        if not text.startswith(f"-- {name}: "):
            raise ValueError(f"includes/{name}.lua: first line must be '-- {name}: <what>'")
        text = text if text.endswith("\n") else text + "\n"
        lib[name] = Include(name, text, includes_of(f"includes/{name}.lua", text))
    for inc in lib.values():
        order(inc.needs, lib, f"includes/{inc.name}.lua")
    return lib


def order(names: Iterable[str], lib: Mapping[str, Include], file: str) -> tuple[str, ...]:
    """``names`` and everything they need, each once, every include after the ones it needs."""
    done: list[str] = []
    path: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in path:
            raise ValueError(f"{file}: includes need each other: {' -> '.join([*path, name])}")
        if name not in lib:
            raise ValueError(f"{file}: no include named {name!r} (lua/includes/{name}.lua)")
        path.append(name)
        for need in lib[name].needs:
            visit(need)
        path.pop()
        done.append(name)

    for name in names:
        visit(name)
    return tuple(done)


def compose(
    name: str,
    text: str,
    lib: Mapping[str, Include],
    flags: Iterable[str] = (),
    scripts: Mapping[str, str] | None = None,
) -> Composed:
    """``#!lua`` (with ``flags``, :func:`shebang`), the header of ``<name>.lua`` (its
    ``text``), the includes it and the scripts it runs name, with what they need, each
    script it runs (``scripts``: their texts) as a function, then its body; with the line map
    (the same for any ``flags``: they change line 1 only)."""
    lines = text.splitlines(keepends=True)
    h = len(_leading_comments(text))
    parts, spans, at = [shebang(flags), *lines[:h]], [Span(2, h + 1, f"{name}.lua", 1)], h + 2
    runs = runs_of(f"{name}.lua", text)
    if runs and scripts is None:
        raise ValueError(f"{name}.lua runs {', '.join(runs)}: compose needs their texts")
    bodies = {run: (scripts or {})[run] for run in runs if run in (scripts or {})}
    if len(bodies) < len(runs):
        missing = sorted(set(runs) - set(bodies))
        raise ValueError(f"{name}.lua: no script named {missing[0]!r} to run")
    needs = [*includes_of(f"{name}.lua", text)]
    for run, body in bodies.items():
        needs += includes_of(f"{run}.lua", body)
    composed = order(sorted(set(needs)), lib, f"{name}.lua")
    for inc in composed:
        n = lib[inc].text.count("\n")
        parts.append(lib[inc].text)
        spans.append(Span(at, at + n - 1, f"includes/{inc}.lua", 1))
        at += n
    for run, body in bodies.items():
        run_lines = body.splitlines(keepends=True)
        rh = len(_leading_comments(body))
        parts.append(f"local function run_{run}(KEYS, ARGV)\n")
        parts += run_lines[rh:]
        parts.append("end\n")
        spans.append(Span(at + 1, at + len(run_lines) - rh, f"{run}.lua", rh + 1))
        at += len(run_lines) - rh + 2
    parts += lines[h:]
    spans.append(Span(at, at + len(lines) - h - 1, f"{name}.lua", h + 1))
    return Composed("".join(parts), tuple(spans), composed)


def place(spans: Iterable[Span], line: int) -> tuple[str, int] | None:
    """The file and line of a composed text's ``line`` (1 based), or None (the ``#!lua`` line,
    or past the end)."""
    for span in spans:
        if span.first <= line <= span.last:
            return span.file, span.start + line - span.first
    return None


def located(text: str, name: str, spans: Iterable[Span]) -> str:
    """An error reply's text with each ``user_script:<N>`` told as ``<file>:<line>``; when a
    line is in an include, ``(in <name>.lua)`` is added, naming the script that ran it. The
    rest of the server's text is kept."""
    spans = tuple(spans)
    in_include = False

    def told(m: re.Match[str]) -> str:
        nonlocal in_include
        where = place(spans, int(m[1]))
        if where is None:
            return m[0]
        in_include = in_include or where[0].startswith("includes/")
        return f"{where[0]}:{where[1]}"

    out = _USER_SCRIPT.sub(told, text)
    return f"{out} (in {name}.lua)" if in_include else out
