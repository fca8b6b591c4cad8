"""Parts side by side: ``run.py --parallel N`` deals every episode (one run of a system under
one scenario and server setting) to one part, balanced by expected length, and the joined
results hold each system's rows in the run's order (scenario, server setting, run), whichever
part ran them. No server: this is the bookkeeping only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "faults"
sys.path.insert(0, str(FAULTS))

from lab import episodes, names, report, sides  # noqa: E402

SCENARIOS = episodes.SCENARIOS


def test_every_episode_lands_in_exactly_one_part_and_the_long_ones_spread() -> None:
    slow = {"recovery_s": 90.0, "scenarios": dict.fromkeys(SCENARIOS)}
    fast = {"recovery_s": 4.0, "scenarios": {**dict.fromkeys(SCENARIOS), "fan-in": "no fan-in"}}
    infos = {"emq": fast, "rq": slow, "arq": fast}
    pairs = names.cells(list(infos), SCENARIOS, 1)
    costs = {c: sides.cost(episodes.QUICK, infos[c[0]], c[1]) for c in pairs}
    parts = sides.split(pairs, 4, costs)
    dealt = [p for part in parts for p in part]
    assert sorted(dealt) == sorted(pairs)
    assert len(dealt) == len(set(dealt))
    fan, oom = ("emq", "fan-in", "-", 0), ("emq", "oom", "-", 0)
    assert costs[fan] < costs[oom] < costs[("rq", "oom", "-", 0)]
    for part in parts:  # the slow system is spread, not one part's whole length
        assert 2 <= sum(1 for sy, *_ in part if sy == "rq") <= 3
        assert part == sorted(part, key=pairs.index)  # a part keeps the run's order
    assert sides.parse_pairs(sides.flag(parts[0])) == parts[0]


def test_a_run_takes_every_cell_repeat_times_under_every_server_setting() -> None:
    cells = names.cells(["emq", "rq"], ["worker-sigkill", "power-loss"], 2)
    assert cells[:6] == [("emq", sc, f, r) for sc, f in
                         [("worker-sigkill", "-"), ("power-loss", "everysec"),
                          ("power-loss", "always")] for r in (0, 1)]  # fmt: skip
    assert len(cells) == 12 and cells[6][0] == "rq"
    assert names.cells(["emq"], ["server-kill"], 1, ["always"]) == [
        ("emq", "server-kill", "always", 0)]  # fmt: skip
    seeds = [names.seed_of(7, r) for r in range(3)]
    assert seeds[0] == 7 and len(set(seeds)) == 3


def test_a_cell_without_its_setting_or_run_is_refused() -> None:
    with pytest.raises(ValueError, match="SYSTEM:SCENARIO:APPENDFSYNC:RUN"):
        sides.parse_pairs("emq:cron:-:0,rq:cron")
    with pytest.raises(ValueError, match="SYSTEM:SCENARIO:APPENDFSYNC:RUN"):
        sides.parse_pairs("emq:cron:-:x")


def test_merged_joins_a_systems_rows_from_every_part(tmp_path: Path) -> None:
    def part(name: str, rows: dict[str, list[str]]) -> Path:
        doc = {"quick": True, "scenarios": SCENARIOS, "seed": 1, "repeat": 1,
               "date": "2026-12-02 10:00 UTC",
               "command": f"run.py --pairs {name}", "file": f"{name}.json",
               "systems": {sy: {"info": {"promise": sy}, "rows": [{"scenario": sc} for sc in scs]}
                           for sy, scs in rows.items()}}  # fmt: skip
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        return path

    a = part("a", {"emq": ["fan-in", "worker-sigkill"], "rq": ["oom"]})
    b = part("b", {"rq": ["worker-sigkill", "cron"], "emq": ["oom"]})
    doc = report.merged([a, b], ["emq", "rq"], same_sizes=True)
    assert list(doc["systems"]) == ["emq", "rq"]
    assert [r["scenario"] for r in doc["systems"]["emq"]["rows"]] == [
        "worker-sigkill", "oom", "fan-in"]  # fmt: skip
    assert [r["scenario"] for r in doc["systems"]["rq"]["rows"]] == [
        "worker-sigkill", "oom", "cron"]  # fmt: skip
    assert doc["files"] == ["a.json", "b.json"]
