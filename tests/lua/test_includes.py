"""Includes, named (docs/lua-contract.md, "Includes"): each script composes only the includes its
``-- Includes:`` line names (and what they need), exactly the ones its body calls, and an error
names the line of the file it comes from, not of the composed text."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path

import pytest
import redis
from redis.exceptions import ResponseError

from emq import Queue
from emq.calls.jobs import QueueCore
from emq.errors import ScriptError
from emq.lua.compose import (
    SHEBANG,
    compose,
    includes_of,
    library,
    located,
    order,
    place,
    runs_of,
)
from emq.lua.scripts import LIBRARY, SCRIPTS, Script, build, refusal, run

from ..support.helpers import assert_consistent, where

LUA = resources.files("emq").joinpath("lua")
_TOKEN = re.compile(
    r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|--[^\n]*|(?<![.:\w])([A-Za-z_]\w*)"""
)
_DEFINED = re.compile(r"(?m)^local (?:function (\w+)|((?:\w+\s*,\s*)*\w+)\s*(?:=|$))")


def text_of(file: str) -> str:
    return LUA.joinpath(file).read_text(encoding="utf-8")


def body(text: str) -> str:
    """A file's text after its leading comment block (its header)."""
    lines = text.splitlines(keepends=True)
    n = next((i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return "".join(lines[n:])


def used(lua: str) -> set[str]:
    """The names a text refers to: identifiers outside strings and comments, not fields."""
    return {m[1] for m in _TOKEN.finditer(lua) if m[1]}


def defined(lua: str) -> set[str]:
    """The names a text defines at its top level: ``local function NAME``, ``local A, B = ...``
    and forward declarations ``local NAME``."""
    out: set[str] = set()
    for m in _DEFINED.finditer(lua):
        out |= {m[1]} if m[1] else {n.strip() for n in m[2].split(",")}
    return out


OWNER = {name: inc for inc in sorted(LIBRARY) for name in defined(LIBRARY[inc].text)}
FILES = {f"{name}.lua": text_of(f"{name}.lua") for name in SCRIPTS} | {
    f"includes/{inc}.lua": LIBRARY[inc].text for inc in LIBRARY
}


def calls(file: str) -> set[str]:
    """The includes whose names the body of ``file`` uses (an include's own names aside)."""
    own = {file[len("includes/") : -len(".lua")]} if file.startswith("includes/") else set()
    return {OWNER[n] for n in used(body(FILES[file])) if n in OWNER} - own


def declared(file: str) -> set[str]:
    return set(includes_of(file, FILES[file]))


# -- the Includes lines against the code (no server) ---------------------------------------------


def test_includes_define_distinct_names() -> None:
    seen: dict[str, str] = {}
    for inc in sorted(LIBRARY):
        for name in defined(LIBRARY[inc].text):
            assert name not in seen, f"{name} is defined by includes {seen.get(name)} and {inc}"
            seen[name] = inc


@pytest.mark.parametrize("file", sorted(FILES))
def test_every_include_named_exists(file: str) -> None:
    for inc in declared(file):
        assert LUA.joinpath("includes", f"{inc}.lua").is_file(), f"{file}: no includes/{inc}.lua"


@pytest.mark.parametrize("file", sorted(FILES))
def test_every_include_function_called_is_provided_by_a_declared_include(file: str) -> None:
    """A name of an include that the body uses comes from an include its own line names, not
    from one that happens to be composed in as another's need."""
    missing = calls(file) - declared(file)
    names = sorted(n for n in used(body(FILES[file])) if OWNER.get(n) in missing)
    assert not missing, f"{file} calls {names} but does not name {sorted(missing)}"


@pytest.mark.parametrize("file", sorted(FILES))
def test_no_declared_include_is_unused(file: str) -> None:
    unused = declared(file) - calls(file)
    assert not unused, f"{file} names {sorted(unused)} but its body uses none of their names"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_no_script_shadows_a_name_of_its_includes(name: str) -> None:
    shadowed = set(re.findall(r"\blocal (?:function )?(\w+)", body(FILES[f"{name}.lua"])))
    shadowed &= {n for n, inc in OWNER.items() if inc in SCRIPTS[name].includes}
    assert not shadowed, f"{name}.lua redefines {sorted(shadowed)}"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_include_name_is_defined_before_it_is_used(name: str) -> None:
    """Lua binds a name to a local only after its ``local`` line (else it reads a global, which
    the server refuses when the line runs): the composed order must put each definition, or a
    forward declaration, first."""
    source = SCRIPTS[name].source
    first: dict[str, int] = {}
    for m in _DEFINED.finditer(source):
        for n in {m[1]} if m[1] else {n.strip() for n in m[2].split(",")}:
            first.setdefault(n, m.start())
    for m in _TOKEN.finditer(source):
        if m[1] in OWNER:
            line = source.count("\n", 0, m.start()) + 1
            assert first.get(m[1], len(source)) <= m.start(), f"{name}: {m[1]} at line {line}"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_composed_text_is_what_is_hashed_and_sent(name: str) -> None:
    script, text = SCRIPTS[name], FILES[f"{name}.lua"]
    head = text[: len(text) - len(body(text))]
    parts = [LIBRARY[inc].text for inc in script.includes]
    runs = runs_of(f"{name}.lua", text)
    parts += [f"local function run_{r}(KEYS, ARGV)\n{body(FILES[f'{r}.lua'])}end\n" for r in runs]
    assert script.source == SHEBANG + head + "".join(parts) + body(text)
    assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
    needs = {*script.header.includes, *(i for r in runs for i in SCRIPTS[r].header.includes)}
    assert script.includes == order(sorted(needs), LIBRARY, name)
    assert len(set(script.includes)) == len(script.includes), "each include once"
    for i, inc in enumerate(script.includes):
        assert set(LIBRARY[inc].needs) <= set(script.includes[:i]), f"{inc} after its needs"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_line_map_tells_every_line_of_the_composed_text(name: str) -> None:
    script = SCRIPTS[name]
    lines = script.source.splitlines()
    assert lines[0] == SHEBANG.strip() and place(script.spans, 1) is None
    wrappers = {f"local function run_{r}(KEYS, ARGV)" for r in runs_of(name, FILES[f"{name}.lua"])}
    for n, line in enumerate(lines[1:], start=2):
        where = place(script.spans, n)
        if where is None and wrappers and (line in wrappers or line == "end"):
            continue  # the function around a script it runs (emq.lua.compose, Runs)
        assert where is not None, f"{name}: composed line {n} has no place"
        file, at = where
        assert FILES[file].splitlines()[at - 1] == line, f"{name}: line {n} is not {file}:{at}"
    assert place(script.spans, len(lines) + 1) is None


def test_a_script_without_includes_composes_its_own_text() -> None:
    assert SCRIPTS["node_lease"].includes == ()
    assert SCRIPTS["node_lease"].source == SHEBANG + FILES["node_lease.lua"]


def test_promoting_due_jobs_is_one_function_in_claim_and_promote() -> None:
    for name in ("claim", "promote"):
        assert "due" in SCRIPTS[name].header.includes
        assert "promote_due(prefix, k_schedule, k_pending, now, " in FILES[f"{name}.lua"]
        assert "ZRANGEBYSCORE', k_schedule" not in FILES[f"{name}.lua"]


def test_claim_and_promote_move_due_jobs_alike(url: str, qname: str, client: redis.Redis) -> None:
    """promote_due, shared by both: the same due jobs move to their lanes, with the same events,
    a rowless id leaves schedule counted as missing, and a job not yet due stays."""
    for how in ("promote", "claim"):
        with Queue.from_url(url, f"{qname}-{how}") as q:
            k = q.core.keys
            lanes = {"a": None, "b": "t1", "c": None, "d": None}
            due, laned, gone, later = (
                q.enqueue(n, delay_ms=60_000, lane=ln) for n, ln in lanes.items()
            )
            client.zadd(k.schedule, {due: 1, laned: 2, gone: 3}, xx=True)  # due by the server
            client.delete(k.job(gone))
            if how == "promote":
                assert q.promote_due() == [due, laned]
            else:
                claims = q.claim(count=10, lease_ms=60_000)
                assert sorted(c.id for c in claims) == sorted([due, laned])
                assert claims.missing == [gone]
            events = [(e.event, e.job, e.fields.get("from")) for e in q.events()]
            assert [e for e in events if e[0] in ("promoted", "missing")] == [
                ("promoted", due, None), ("promoted", laned, None), ("missing", gone, "schedule")
            ]  # fmt: skip
            assert client.hget(k.metrics, "missing") == "1"
            assert where(client, q.name, later) == ["schedule"]
            assert_consistent(client, q.name)


# -- composing, by hand ----------------------------------------------------------------------------


def small_library() -> dict[str, str]:
    return {
        "a": "-- a: first\n-- Includes: none\nlocal function fa() return 1 end\n",
        "b": "-- b: second\n-- Includes: a\nlocal function fb() return fa() end\n",
        "c": "-- c: third\n-- Includes: a, b\nlocal function fc() return fa() + fb() end\n",
    }


def test_includes_compose_after_what_they_need_and_once_each() -> None:
    lib = library(small_library())
    text = "-- x: a -> b\n-- Includes: b, c\nreturn fc() + fb()\n"
    got = compose("x", text, lib)
    assert got.includes == ("a", "b", "c")
    assert got.source.count("local function fa") == 1
    assert got.source.startswith("#!lua\n-- x: a -> b\n-- Includes: b, c\n-- a: first\n")
    assert got.source.endswith("return fc() + fb()\n")
    last = len(got.source.splitlines())
    assert place(got.spans, last) == ("x.lua", 3)
    assert place(got.spans, 4) == ("includes/a.lua", 1)
    assert place(got.spans, 2) == ("x.lua", 1)


@pytest.mark.parametrize(
    ("texts", "script", "error"),
    [
        ({}, "-- x: a -> b\n-- Includes: nope\nreturn 1\n", "no include named 'nope'"),
        ({}, "-- x: a -> b\nreturn 1\n", "needs one line"),
        (small_library(), "-- x: a -> b\n-- Includes: b, a\nreturn 1\n", "sorted"),
        (small_library(), "-- x: a -> b\n-- Includes: a, a\nreturn 1\n", "sorted"),
        (small_library(), "-- x: a -> b\n-- Includes: a,b\nreturn 1\n", "sorted"),
        (small_library(), "-- x: a -> b\n-- Includes: \nreturn 1\n", "sorted"),
    ],
)
def test_a_broken_includes_line_is_refused_at_load(
    texts: dict[str, str], script: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        compose("x", script, library(texts))


def test_includes_that_need_each_other_are_refused() -> None:
    texts = small_library() | {"a": "-- a: first\n-- Includes: c\nlocal function fa() end\n"}
    with pytest.raises(ValueError, match=r"need each other: (a -> c -> a|c -> a -> c)"):
        library(texts)


def test_an_include_needs_its_name_on_its_first_line() -> None:
    with pytest.raises(ValueError, match="first line"):
        library({"a": "-- b: first\n-- Includes: none\n"})


def test_located_tells_each_line_and_keeps_the_rest() -> None:
    spans = SCRIPTS["claim"].spans
    inside = next(s for s in spans if s.file == "includes/lanes.lua")
    own = spans[-1]
    text = f"user_script:{own.first}: boom script: abc, on @user_script:{own.first}."
    want = f"claim.lua:{own.start}: boom script: abc, on @claim.lua:{own.start}."
    assert located(text, "claim", spans) == want
    text = f"oops script: on @user_script:{inside.first + 2}."
    assert located(text, "claim", spans) == "oops script: on @includes/lanes.lua:3. (in claim.lua)"
    assert located("user_script:99999: far", "claim", spans) == "user_script:99999: far"


# -- errors from a real server ---------------------------------------------------------------------

BROKEN = """\
-- broken: nowhere -> nowhere (a test's script, composed like every script)
--
-- KEYS[1] meta       HASH    queue flags
-- ARGV[1] prefix     string  the queue's key prefix, emq:{<queue>}:
-- ARGV[2] where      string  'body': fail in this file; 'include': in an include function
-- Returns: nothing: it fails
-- Errors: none
-- Derives: nothing
-- Includes: clock, lanes
local k_meta = KEYS[1]
local prefix = ARGV[1]
local where = ARGV[2]

use_lanes(prefix, k_meta)
local now = server_ms()
if where == 'include' then
  return lane_key(nil, 'active')
end
error('broken on purpose at ' .. now)
"""


def line_of(text: str, piece: str) -> int:
    """The 1-based line of ``text`` that holds ``piece`` (exactly one does)."""
    found = [i for i, line in enumerate(text.splitlines(), start=1) if piece in line]
    assert len(found) == 1, (piece, found)
    return found[0]


def run_text(client: redis.Redis, script: Script, keys: list[str], args: list[str]) -> None:
    """Load and run a test's script the way the loader's scripts run (EVALSHA of the composed
    text), raising its error reply as emq does."""
    try:
        assert client.script_load(script.source) == script.sha
        client.evalsha(script.sha, len(keys), *keys, *args)
    except ResponseError as exc:
        raise refusal(exc, script) from None


def test_an_error_names_the_scripts_own_line(client: redis.Redis, qname: str) -> None:
    script = build("broken", BROKEN)
    prefix = QueueCore(qname).keys.prefix
    with pytest.raises(ScriptError) as info:
        run_text(client, script, [prefix + "meta"], [prefix, "body"])
    line = line_of(BROKEN, "error('broken on purpose")
    text = str(info.value)
    assert f"broken.lua:{line}: broken on purpose at " in text, text
    assert "user_script" not in text and "(in " not in text, text


def test_an_error_inside_an_include_names_the_include_line(client: redis.Redis, qname: str) -> None:
    script = build("broken", BROKEN)
    prefix = QueueCore(qname).keys.prefix
    with pytest.raises(ScriptError) as info:
        run_text(client, script, [prefix + "meta"], [prefix, "include"])
    line = line_of(LIBRARY["lanes"].text, "return lane_prefix .. 'lane:' .. lane")
    text = str(info.value)
    assert f"includes/lanes.lua:{line}: attempt to concatenate" in text, text
    assert text.endswith("(in broken.lua)") and "user_script" not in text, text


def test_a_syntax_error_names_the_scripts_own_line(client: redis.Redis, qname: str) -> None:
    text = BROKEN.replace("local now = server_ms()", "local now = = server_ms()")
    with pytest.raises(ScriptError) as info:
        run_text(client, build("broken", text), [qname], [qname, "body"])
    line = line_of(text, "= = server_ms()")
    assert f"broken.lua:{line}: unexpected symbol" in str(info.value), str(info.value)


def test_a_real_scripts_error_names_its_line(client: redis.Redis, qname: str) -> None:
    """The loaded scripts, dispatched EVALSHA-first by ``run``: an argument no binding would
    send (a count that is not a number) fails on claim.lua's own line, and a limit that is
    not a number fails in promote_due, on its include's line."""
    core = QueueCore(qname)
    claim = core.claim(5, 1000)
    with pytest.raises(ScriptError) as info:
        run(client, "claim", claim.keys, [*claim.args[:2], "x", *claim.args[3:]])
    line = line_of(FILES["claim.lua"], "if want <= 0 then")
    assert f"claim.lua:{line}: attempt to compare" in str(info.value), str(info.value)
    promote = core.promote_due(10)
    with pytest.raises(ScriptError) as info:
        run(client, "promote", promote.keys, [*promote.args[:2], "x"])
    line = line_of(LIBRARY["due"].text, "redis.call('ZRANGEBYSCORE'")
    text = str(info.value)
    assert f"@includes/due.lua:{line}." in text and text.endswith("(in promote.lua)"), text


def test_the_contract_lists_every_include_with_what_it_needs_and_who_names_it() -> None:
    """docs/lua-contract.md, "Includes": one table row per include."""
    doc = (Path(__file__).parents[2] / "docs" / "lua-contract.md").read_text()
    rows = {}
    for line in doc.splitlines():
        if m := re.match(r"\| `(\w+)`(?: \(needs ([^)]*)\))? \| .* \| ([^|]+) \|$", line):
            needs = tuple(re.findall(r"`(\w+)`", m[2] or ""))
            cell = m[3].strip()
            named = set(cell.removeprefix("all but ").split(", "))
            rows[m[1]] = (needs, set(SCRIPTS) - named if cell.startswith("all but ") else named)
    assert set(rows) == set(LIBRARY), "one row per include"
    for inc, (needs, scripts) in rows.items():
        assert needs == LIBRARY[inc].needs, inc
        assert scripts == {n for n, s in SCRIPTS.items() if inc in s.header.includes}, inc
