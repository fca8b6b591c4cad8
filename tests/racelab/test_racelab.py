"""The race lab's scenarios and interleaver, on real servers (Valkey and Redis).

Every readout is asserted exactly, in both forms: the atomic form (the real sweep_stalled
script) recovers once and counts exactly; the naive round-trip loop, driven through the same
schedule, recovers twice, loses increments and delivers twice.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import redis

from emq.queue._sync.queue import Queue
from emq.racelab import forms
from emq.racelab.forms import NAIVE_STEPS, Mode
from emq.racelab.interleaver import lab_run, spec_for
from emq.racelab.scenarios import SCENARIOS, run_scenario
from emq.racelab.schedule import ActorSpec, Schedule, ScheduleError, merges
from emq.racelab.wire import execute

# scenario -> mode -> (recover_count, stalled, expected_stalled, lost, double_delivered)
READOUTS: dict[str, dict[str, tuple[int, int, int, int, bool]]] = {
    "two-sweeps": {"atomic": (1, 1, 1, 0, False), "naive": (2, 2, 2, 0, False)},
    "counter": {"atomic": (2, 2, 2, 0, False), "naive": (2, 1, 2, 1, False)},
    "worked-example": {"atomic": (1, 3, 3, 0, False), "naive": (2, 3, 4, 1, False)},
    "claim-between": {"atomic": (1, 1, 1, 0, False), "naive": (2, 2, 2, 0, True)},
}
CASES = [(s, m) for s in READOUTS for m in ("atomic", "naive")]
A, B = ActorSpec("A", "sweep"), ActorSpec("B", "sweep")


def leftovers(client: redis.Redis, queue: str) -> list[Any]:
    return list(client.scan_iter(match=f"emq:{{{queue}}}:*", count=1000))


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_scenario_readouts_exact(client: redis.Redis, name: str, mode: Mode) -> None:
    outcome = run_scenario(client, name, mode)
    d = outcome.as_dict()
    got = (
        d["recover_count"],
        d["stalled"],
        d["expected_stalled"],
        d["lost_increments"],
        d["double_delivered"],
    )
    assert got == READOUTS[name][mode]
    assert d["scenario"] == name and d["mode"] == mode
    assert all(set(step) == {"actor", "step", "command", "reply"} for step in d["steps"])
    if mode == "atomic":  # G1 at every step boundary, and every sweep is one EVALSHA
        assert not d["in_two_sets"] and not d["in_none"]
        sweeps = [s for s in d["steps"] if s["actor"] in ("A", "B")]
        assert [s["step"] for s in sweeps] == ["sweep", "sweep"]
        assert all(s["command"].startswith("EVALSHA sweep_stalled.lua") for s in sweeps)
    assert leftovers(client, outcome.result.queue) == []


def test_two_sweeps_naive_steps_and_replies(client: redis.Redis) -> None:
    """B slips between A's detect and move: both probes see the expired lease; A's ZREM
    removes it (1), B's finds nothing (0), and B's ZADD re-adds an existing member (0)."""
    d = run_scenario(client, "two-sweeps", "naive").as_dict()
    by = {(s["actor"], s["step"]): s for s in d["steps"]}
    assert float(by[("A", "probe")]["reply"]) == float(by[("B", "probe")]["reply"]) == 1.0
    assert (by[("A", "remove")]["reply"], by[("B", "remove")]["reply"]) == (1, 0)
    assert (by[("A", "requeue")]["reply"], by[("B", "requeue")]["reply"]) == (1, 0)
    order = [f"{s['actor']}.{s['step']}" for s in d["steps"]]
    assert order[:6] == ["A.detect", "A.detect", "B.detect", "B.detect", "A.probe", "B.probe"]
    assert d["readout"].startswith("recover count 2 for 1 expired lease: B slipped between")
    assert d["in_none"] and not d["in_two_sets"]


@pytest.mark.parametrize("name", ["two-sweeps", "claim-between"])
def test_the_naive_readout_words_agree_with_its_figures(client: redis.Redis, name: str) -> None:
    """The readout is printed next to ``stalled 2 (expected 2)``: its words say what the
    figures say (each recovery counted; one lapse), never "the counter reads 2 for one
    stall", which read as a wrong count next to an expected 2."""
    d = run_scenario(client, name, "naive").as_dict()
    assert "one stall" not in d["readout"], d["readout"]
    if name == "two-sweeps":
        figures = f"stalled {d['stalled']}, as expected for {d['recover_count']} recoveries"
        assert figures in d["readout"] and d["stalled"] == d["expected_stalled"]
        assert f"so {d['lapses']} lapse reads as {d['stalled']} stalls" in d["readout"]
    else:
        assert f"delivered twice for {d['lapses']} expired lease" in d["readout"]
    assert d["lapses"] == 1


def test_counter_naive_both_read_before_either_writes(client: redis.Redis) -> None:
    d = run_scenario(client, "counter", "naive").as_dict()
    reads = [s["reply"] for s in d["steps"] if s["step"] == "read"]
    writes = [s["command"].split()[-1] for s in d["steps"] if s["step"] == "write"]
    assert (reads, writes) == (["0", "0"], ["1", "1"])
    assert d["lapses"] == 2 and "1 increment lost" in d["readout"]


def test_counter_atomic_counts_in_script(client: redis.Redis) -> None:
    d = run_scenario(client, "counter", "atomic").as_dict()
    assert d["readout"].startswith("in-script HINCRBY x2 -> stalled = 2 where 2 is right")


def test_worked_example_repeated_four_stalls_record_two(client: redis.Redis) -> None:
    naive = run_scenario(client, "worked-example", "naive").as_dict()
    atomic = run_scenario(client, "worked-example", "atomic").as_dict()
    reads = [s["reply"] for s in naive["steps"] if s["step"] == "read"]
    assert reads == ["2", "2"]
    assert "records 3 where 4 is right" in naive["readout"]
    rep = naive["repeated"]
    assert (rep["recover_count"], rep["stalled"], rep["lost_increments"]) == (4, 2, 2)
    assert "4 stalls recorded as 2" in naive["readout"]
    rep = atomic["repeated"]
    assert (rep["recover_count"], rep["stalled"], rep["lost_increments"]) == (2, 2, 0)


def test_claim_between_is_double_delivery_not_pending_twice(client: redis.Redis) -> None:
    d = run_scenario(client, "claim-between", "naive").as_dict()
    claims = [s for s in d["steps"] if s["step"] == "claim"]
    assert [c["actor"] for c in claims] == ["W", "W2"]
    # both workers got the job (after the deadline, the missing ids and retry_in)
    assert all(c["reply"][3] == d["job"] for c in claims)
    assert d["in_two_sets"] and d["double_delivered"]
    assert "never 'in pending twice'" in d["readout"]
    atomic = run_scenario(client, "claim-between", "atomic").as_dict()
    w2 = [s for s in atomic["steps"] if s["actor"] == "W2"]
    assert len(w2[0]["reply"]) == 3  # deadline, no missing ids, retry_in: nothing to hand out


def _run(client: redis.Redis, qname: str, mode: Mode, actors: list[ActorSpec], sched: str) -> Any:
    spec = spec_for(qname, mode, actors, sched)
    return execute(client, lab_run(spec, Queue(client, qname).new_id()))


def test_schedule_runs_skipped_steps_and_a_finished_actor_is_a_no_op(
    client: redis.Redis, qname: str
) -> None:
    """The issue's example schedule names no probe: A.remove runs A's probe first; B's probe
    then finds the job gone, so B stops and its later tokens do nothing."""
    r = _run(client, qname, "naive", [A, B], "A.detect B.detect A.remove A.requeue B.remove")
    steps = [f"{s.actor}.{s.step}" for s in r.steps]
    assert steps[4:8] == ["A.probe", "A.remove", "A.requeue", "B.probe"]
    assert "B.remove" not in steps
    assert (r.recover_count, r.stalled) == (1, 1)
    assert leftovers(client, qname) == []


@pytest.mark.parametrize(
    ("mode", "sched", "message"),
    [
        ("naive", "A.detect A.bogus", "has the steps"),
        ("naive", "C.detect", "no actor 'C'"),
        ("atomic", "A.detect", "in atomic mode sweep A has the steps sweep"),
        ("naive", "A-detect", "is not ACTOR.step"),
    ],
)
def test_bad_schedules_are_refused_before_anything_is_sent(
    client: redis.Redis, qname: str, mode: Mode, sched: str, message: str
) -> None:
    with pytest.raises(ScheduleError, match=message):
        _run(client, qname, mode, [A, B], sched)
    assert leftovers(client, qname) == []


def test_a_step_already_passed_is_refused(client: redis.Redis, qname: str) -> None:
    with pytest.raises(ScheduleError, match="past it"):
        _run(client, qname, "naive", [A, B], "A.remove A.detect")
    assert leftovers(client, qname) == []


def test_merges_counts_every_interleaving() -> None:
    assert sum(1 for _ in merges({"A": NAIVE_STEPS, "B": NAIVE_STEPS})) == 924
    with_w = merges({"A": NAIVE_STEPS, "B": NAIVE_STEPS, "W": ("claim",)})
    schedules = {str(s) for s in with_w}
    assert len(schedules) == 12_012
    assert str(Schedule.parse("A.sweep  B.sweep")) == "A.sweep B.sweep"


def test_naive_form_is_the_marked_cautionary_form_and_used_nowhere_else() -> None:
    assert "THE CAUTIONARY FORM" in (forms.naive_sweep.__doc__ or "")
    src = pathlib.Path(forms.__file__).resolve().parents[1]
    users = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*.py")
        if "naive_sweep" in p.read_text(encoding="utf-8")
    }
    assert users and all(u.startswith("racelab/") for u in users), users


def test_scenario_names_match_the_issue() -> None:
    assert list(SCENARIOS) == ["two-sweeps", "counter", "worked-example", "claim-between"]
