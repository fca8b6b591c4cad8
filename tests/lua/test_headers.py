"""Every Lua header is parsed and checked against its Python binding (STYLE rule 1)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from emq.calls import control as edits
from emq.calls import logs
from emq.calls import repeats as rep
from emq.calls.control import cancel_call
from emq.calls.flows import deliver_call, flow_plan, flow_steps
from emq.calls.jobs import QueueCore, node_lease
from emq.calls.results import await_result
from emq.calls.settings import settings_call, upgrade
from emq.calls.steps import step_call
from emq.lua.compose import flags_of, runs_of
from emq.lua.scripts import SCRIPTS, parse_header, quiet
from emq.model.records import JobSpec

ID = "JOB0000000000A"
core = QueueCore("hdr")
spec_group = core.job_spec(JobSpec("send", {"a": 1}, priority=1))  # full groups, not compact
spec_group[0] = ID
flow_nodes = flow_plan(core, JobSpec("sum"), [JobSpec("part")])  # two groups
for _n, _node in enumerate(flow_nodes):
    _node.group[0] = f"JOB000000000{_n}A"

# one sample call per script, with two items where the script takes a repeated group
SAMPLES = {
    "enqueue": core.enqueue([spec_group, list(spec_group)]),
    "enqueue_flow": flow_steps(core, flow_nodes)[0],
    "deliver_flow": deliver_call(
        core, "hdr2", [ID, ID + "@hdr", "completed", "ignore", "", ID, ID + "@x", "dead", "", ""]
    ),
    "claim": core.claim(5, 1000),
    "extend": core.extend([(ID, 1), (ID, 2)], 1000),
    "complete": core.complete([(ID, 1), (ID, 2)]),
    "complete_claim": core.complete_claim(core.complete([(ID, 1), (ID, 2)]), core.claim(5, 1000)),
    "fail": core.fail([(ID, 1, "x", True, None), (ID, 2, "y", False, None)]),
    "delay": core.delay([(ID, 1, 0), (ID, 2, 5, 100, "tenant-1")]),
    "promote": core.promote_due(10),
    "sweep_stalled": core.sweep_stalled(2, 100),
    "redrive": core.redrive([ID, ID], False),
    "remove": core.remove(ID),
    "pause": core.pause(),
    "resume": core.resume("tenant-1"),
    "set_limits": core.set_limits(
        concurrency=5, rate=(50, 1000), lane=None, lane_concurrency=2, lane_rate=None, weight=None
    ),
    "lanes": core.lanes(),
    "drain": core.drain(10),
    "obliterate": core.obliterate(10, False),
    "node_lease": node_lease(3, "owner", 1000),
    "cancel": cancel_call(core, ID, "why"),
    "await_result": await_result(core, ID, register=True),
    "promote_job": edits.promote(core, ID),
    "reschedule": edits.reschedule(core, ID, 100),
    "set_priority": edits.set_priority(core, ID, -3),
    "update_payload": edits.update_payload(core, ID, {"b": 2}),
    "progress": edits.progress(core, [(ID, 1, "0.5"), (ID, 2, '{"done": 3}')]),
    "job_log": logs.job_log(core, [(ID, 1, "started"), (ID, 1, "done")]),
    "step": step_call(core, ID, 1, "charge card", '{"ok":true}', 12, ok=True),
    "set_repeat": rep.set_repeat(
        core, rep.repeat_spec(core, "nightly", "send", every_ms=9), 1_800_000_000_000
    ),
    "unrepeat": rep.unrepeat(core, "nightly"),
    "due_repeats": rep.due_repeats(core),
    "fire_repeats": rep.fire_repeats(core, [("a", "1", 5, 5, 9, 0), ("b", "2", 5, 7, 9, 1)]),
    "settings": settings_call(core.keys, "set", {"max_attempts": "5", "result_ttl_ms": "9"}),
    "upgrade": upgrade(core.keys),
}


def test_every_script_has_a_sample() -> None:
    assert set(SAMPLES) == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_header_matches_binding(name: str) -> None:
    script = SCRIPTS[name]
    header = script.header
    call = SAMPLES[name]
    assert call.script == name
    assert len(call.keys) == len(header.keys), f"{name}: KEYS count differs from its header"
    for key, declared in zip(call.keys, header.keys, strict=True):
        per_job = f":{declared}:{ID}" in key  # a key of one job: job:<id>, done:<id>
        assert key.endswith(declared) or per_job or declared == "node", f"{name}: {key}"
    fixed = len(header.args)
    assert len(call.args) >= fixed
    runs = runs_of(f"{name}.lua", script.source.split("\n", 1)[1])
    if runs:  # after its own ARGV, the ARGV of each script it runs
        assert len(call.args) - fixed == sum(len(SAMPLES[part].args) for part in runs)
    elif header.group:
        assert (len(call.args) - fixed) % len(header.group) == 0
        assert len(call.args) - fixed == 2 * len(header.group), "sample holds two groups"
    else:
        assert len(call.args) == fixed, f"{name}: ARGV count differs from its header"
    for t in header.key_types:
        assert t in {"ZSET", "HASH", "STREAM", "STRING", "LIST", "SET"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_names_a_key(name: str) -> None:
    """A cluster sends a script to the node of its first key: a script with no key would
    land on any node and find its queue's keys missing there."""
    assert SCRIPTS[name].header.keys, f"{name}.lua declares no KEYS"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_key_and_argument_is_bound_by_name(name: str) -> None:
    src = SCRIPTS[name].source
    for i, key in enumerate(SCRIPTS[name].header.keys, start=1):
        local = "k_" + key.replace("-", "_")
        assert re.search(rf"^local {local} = KEYS\[{i}\]$", src, re.M), f"{name}: bind {local}"
    for i, arg in enumerate(SCRIPTS[name].header.args, start=1):
        assert re.search(rf"^local {arg} = .*ARGV\[{i}\]", src, re.M), f"{name}: bind {arg}"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_no_unbounded_or_keyspace_wide_commands(name: str) -> None:
    src = SCRIPTS[name].source
    for banned in ("'KEYS'", "'SCAN'", "'FLUSHALL'", "'FLUSHDB'", "while true"):
        assert banned not in src


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_header_ends_with_its_includes_line(name: str) -> None:
    """The last header line names the includes the body calls (tests/lua/test_includes.py
    checks the names against the body)."""
    lines = resources.files("emq").joinpath("lua", f"{name}.lua").read_text().splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]
    names = ", ".join(SCRIPTS[name].header.includes) or "none"
    assert header[-1] == f"-- Includes: {names}"


# the scripts that run at maxmemory (docs/guarantees.md, "At maxmemory"): each adds nothing
# there, measured in tests/ops/test_oom.py; every other script may grow memory and stays
# refused whole (claim, enqueue, complete, fail, cancel, ...)
ALLOW_OOM = {"extend", "remove", "drain", "obliterate"}


def test_only_the_scripts_that_add_nothing_run_at_maxmemory() -> None:
    assert {n for n, s in SCRIPTS.items() if s.header.flags} == ALLOW_OOM
    assert {n for n, s in SCRIPTS.items() if s.at_maxmemory is not None} == ALLOW_OOM


@pytest.mark.parametrize("name", sorted(ALLOW_OOM))
def test_the_allow_oom_shape_differs_by_its_first_line_only(name: str) -> None:
    """Same header, includes, body and line map; only the shebang carries the flag."""
    plain, shape = SCRIPTS[name], SCRIPTS[name].at_maxmemory
    assert shape is not None and shape.at_maxmemory is None
    first, rest = plain.source.split("\n", 1)
    assert first == "#!lua" and shape.source == "#!lua flags=allow-oom\n" + rest
    assert shape.spans == plain.spans and shape.sha != plain.sha
    lines = resources.files("emq").joinpath("lua", f"{name}.lua").read_text().splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]
    assert header[-2] == "-- Flags: allow-oom", f"{name}: the Flags line goes before Includes"


@pytest.mark.parametrize("name", sorted(ALLOW_OOM))
def test_at_maxmemory_a_script_is_sent_with_no_events(name: str) -> None:
    """A flagged script that appends events takes ``maxlen``, which the resend sets to 0;
    one without it never turns events on (``use_events``: emit() then appends nothing)."""
    script, call = SCRIPTS[name], SAMPLES[name]
    args = quiet(script, call.args)
    if "maxlen" in script.header.args:
        at = script.header.args.index("maxlen")
        assert args[at] == 0 and args[:at] + args[at + 1 :] == call.args[:at] + call.args[at + 1 :]
    else:
        text = resources.files("emq").joinpath("lua", f"{name}.lua").read_text()
        assert args == call.args and "use_events(" not in text and "'XADD'" not in text


def test_flags_line_shape_is_enforced() -> None:
    head = "-- x: a -> b\n-- Returns: 1\n-- Errors: n\n-- Derives: n\n"
    assert flags_of("x.lua", head + "-- Includes: none\n") == ()
    assert flags_of("x.lua", head + "-- Flags: allow-oom\n-- Includes: none\n") == ("allow-oom",)
    for bad in ("no-writes", "allow-cross-slot-keys", "allow-oom, allow-oom"):
        with pytest.raises(ValueError, match="one line '-- Flags: allow-oom'"):
            flags_of("x.lua", head + f"-- Flags: {bad}\n-- Includes: none\n")
    with pytest.raises(ValueError, match=r"^x\.lua: the header may have one line"):
        flags_of("x.lua", head + "-- Flags: allow-oom\n-- Flags: allow-oom\n")


def test_header_shape_is_enforced() -> None:
    with pytest.raises(ValueError, match="first line"):
        parse_header("x", "-- y: a -> b\n-- Returns: 1\n-- Errors: none\n-- Derives: nothing\n")
    with pytest.raises(ValueError, match="Derives"):
        parse_header("x", "-- x: a -> b\n-- KEYS[1] a  ZSET  z\n-- Returns: 1\n-- Errors: none\n")
    with pytest.raises(ValueError, match="KEYS indices"):
        parse_header(
            "x", "-- x: a -> b\n-- KEYS[2] a  ZSET  z\n-- Returns: 1\n-- Errors: n\n-- Derives: n\n"
        )
    with pytest.raises(ValueError, match="Includes"):
        parse_header("x", "-- x: a -> b\n-- Returns: 1\n-- Errors: none\n-- Derives: nothing\n")
    with pytest.raises(ValueError, match="sorted"):
        parse_header(
            "x",
            "-- x: a -> b\n-- Returns: 1\n-- Errors: n\n-- Derives: n\n-- Includes: wake, clock\n",
        )


def test_every_transition_of_the_graph_has_its_script_and_its_doc() -> None:
    from pathlib import Path

    from emq.model.states import TRANSITIONS

    lifecycle = (Path(__file__).parents[2] / "docs" / "lifecycle.md").read_text()
    for name in TRANSITIONS:
        assert name in SCRIPTS, f"{name} has no lua/{name}.lua"
        assert f"**{name}**" in lifecycle, f"docs/lifecycle.md does not describe {name}"


def test_an_enqueue_of_the_common_case_sends_compact_groups() -> None:
    """enqueue.lua's ARGV[5]: jobs of the common case sharing max_attempts go as (id, name,
    payload) alone; one job that is not makes the whole call full groups."""
    plain = core.job_spec(JobSpec("send", {"a": 1}))
    plain[0] = ID
    header = SCRIPTS["enqueue"].header
    compact = core.enqueue([plain, list(plain)]).args
    assert compact[len(header.args) - 1] == str(plain[4])
    assert compact[len(header.args) :] == [*plain[:3], *plain[:3]]
    full = core.enqueue([plain, spec_group]).args
    assert full[len(header.args) - 1] == ""
    assert len(full) - len(header.args) == 2 * len(header.group)
