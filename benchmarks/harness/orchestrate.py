"""The run: sizes, the order of measurements, medians, and the results document.

Every figure is measured round-robin: run 1 of every system, then run 2 of every system, and
so on, so a change in the machine's load during the run spreads over all systems alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import figures, measure, raw, report
from .measure import Peer, RunError
from .node import NODE_PEERS, SKIPPED, ensure_node_peers
from .server import Server
from .stats import median
from .venvs import REPO, VENV, ensure_peers, peer_python

FULL = {
    "enqueue_one": 3_000,
    "enqueue_bulk": 20_000,
    "memory_jobs": 100_000,
    "proc_deadline_s": 25.0,
    "latency_rate": 1_000.0,
    "latency_s": 3.0,
    "sweep_leases": 100_000,
    "bench_n": 200_000,
    "redis_py_n": 20_000,
}
QUICK = FULL | {
    "enqueue_one": 1_000,
    "enqueue_bulk": 10_000,
    "memory_jobs": 10_000,
    "proc_deadline_s": 10.0,
    "latency_s": 2.0,
    "sweep_leases": 20_000,
    "bench_n": 100_000,
    "redis_py_n": 5_000,
}
# Jobs per processing run, sized so that one run takes a few seconds at each system's rate.
PROC_JOBS = {
    "emq": 40_000,
    "emq-loop": 60_000,
    "rq": 400,
    "arq": 2_000,
    "streaq": 3_000,
    "bullmq": 4_000,
    "celery": 4_000,
    "bullmq-node": 20_000,
}
PROC_DEFAULT = 6_000

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[bench {time.monotonic() - T0:6.0f}s] {msg}", flush=True)


def _repeat(
    label: str,
    runs: int,
    systems: dict[str, dict[str, Any]],
    peers: dict[str, Peer],
    key: str,
    fn: Callable[[str, Peer, int], dict[str, Any]],
) -> None:
    for i in range(runs):
        for name, peer in peers.items():
            s = systems[name]
            try:
                out = fn(name, peer, i)
            except (RunError, Exception) as exc:  # record any failure; never drop a peer
                if not isinstance(exc, RunError):
                    traceback.print_exc()
                out = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            s["runs"].setdefault(key, []).append(out)
            shown = out.get("error") or ", ".join(
                f"{k}={v:,.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()
            )
            log(f"{label} run {i + 1}/{runs} {name}: {shown}")


def _med(s: dict[str, Any], key: str, field: str) -> float | None:
    return median([r[field] for r in s["runs"].get(key, []) if field in r])


def _summarise(s: dict[str, Any]) -> None:
    figs = {
        "enqueue_one": _med(s, "enqueue_one", "rate"),
        "enqueue_bulk": _med(s, "enqueue_bulk", "rate"),
        "memory_bytes_per_job": _med(s, "memory", "memory_bytes_per_job"),
        "keys_per_job": _med(s, "memory", "keys_per_job"),
        "proc_1": _med(s, "proc_1", "rate"),
        "proc_2": _med(s, "proc_2", "rate"),
        "latency_p50_ms": _med(s, "latency", "p50_ms"),
        "latency_p99_ms": _med(s, "latency", "p99_ms"),
        "server_enqueue_us": _med(s, "enqueue_bulk", "server_us_per_job"),
        "server_drain_us": _med(s, "proc_1", "server_us_per_job"),
    }
    if figs["server_enqueue_us"] is not None and figs["server_drain_us"] is not None:
        figs["server_us_per_job"] = figs["server_enqueue_us"] + figs["server_drain_us"]
    lat = [r for r in s["runs"].get("latency", []) if "p50_ms" in r]
    figs["latency_saturated"] = sum(1 for r in lat if r["saturated"]) * 2 > len(lat)
    s["figures"] = figs
    errors = {k: [r["error"] for r in v if "error" in r] for k, v in s["runs"].items()}
    s["errors"] = {k: v for k, v in errors.items() if v}
    measured = [v for k, v in figs.items() if k != "latency_saturated" and v is not None]
    if not measured:
        s["status"] = "run failed"
        s["error"] = "; ".join(f"{k}: {v[0]}" for k, v in s["errors"].items())[:400]
    elif s["errors"]:
        s["status"] = "ok"
        s["error"] = "some runs failed: " + "; ".join(
            f"{k}: {v[0]}" for k, v in s["errors"].items()
        )
    else:
        s["status"] = "ok"


def _info(peer: Peer, url: str) -> dict[str, Any]:
    try:
        return measure.run_json(peer, "info", url, timeout=60)
    except RunError as exc:
        return {"error": str(exc)}


def _raw(server: Server, cfg: dict[str, Any], runs: int) -> dict[str, Any]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for i in range(runs):
        server.flush()
        batch = {
            "bench": raw.redis_benchmark(server, 1, cfg["bench_n"]),
            "bench_pipelined": raw.redis_benchmark(server, 16, cfg["bench_n"] * 5),
            "redis_py_sync": raw.redis_py_sync(server, cfg["redis_py_n"]),
            "redis_py_async": raw.redis_py_async(server, cfg["redis_py_n"]),
        }
        for kind, out in batch.items():
            kinds.setdefault(kind, []).append(out)
        log(f"raw run {i + 1}/{runs}: " + ", ".join(f"{k}={v}" for k, v in batch.items()))
    return {"runs": kinds, "figures": figures.raw_figures(kinds)}


def _sweep(server: Server, cfg: dict[str, Any], runs: int) -> dict[str, Any]:
    from sweep_backlog import measure as sweep_measure

    out: list[dict[str, Any]] = []
    for i in range(runs):
        server.flush()
        out.append(sweep_measure(server.url, cfg["sweep_leases"], 100))
        log(f"sweep run {i + 1}/{runs}: {out[-1]}")
    summary: dict[str, Any] = {"runs": out, "leases": cfg["sweep_leases"], "limit": 100}
    for field in ("rate", "call_max_ms", "call_p99_ms", "server_usec_per_call", "calls",
                  "server_us_per_lease"):  # fmt: skip
        summary[field] = median([r[field] for r in out])
    summary["call_max_ms_worst"] = max(r["call_max_ms"] for r in out)
    return summary


def _git_head() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    )
    return done.stdout.strip()


def _src_changes() -> list[str]:
    """Uncommitted changes under src/ (emq is installed editable, so they were measured)."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
    )
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def run_all(args: argparse.Namespace, command: str) -> None:
    cfg = QUICK if args.quick else FULL
    load_start = os.getloadavg()
    src_changes = _src_changes()
    stamp = datetime.now().strftime("%Y-%m-%d-%H%M%S") + ("-quick" if args.quick else "")
    log(f"load average at start: {load_start}")
    peer_names = [s for s in args.systems if s != "emq"]
    failed = ensure_peers(peer_names) | ensure_node_peers(peer_names)
    for name, err in failed.items():
        log(f"{name}: {err}")
    server = Server().start()
    log(f"server: {server.info}")
    systems: dict[str, dict[str, Any]] = {}
    peers: dict[str, Peer] = {}
    modes = {"worker": ["worker"], "loop": ["loop"], "both": ["worker", "loop"]}[args.emq_mode]
    for name in args.systems:
        entries = [(name, Peer(name))]
        if name == "emq":
            entries = [
                ("emq" if m == "worker" else "emq-loop", Peer("emq", emq_mode=m)) for m in modes
            ]
        for label, peer in entries:
            if name in failed:
                err = failed[name]
                status = "skipped" if err.startswith(SKIPPED) else "install failed"
                systems[label] = {"status": status, "error": err.removeprefix(SKIPPED), "runs": {}}
                continue
            info = _info(peer, server.url)
            if "error" in info:
                systems[label] = {"status": "import failed", "error": info["error"], "runs": {}}
                continue
            peer.append = name == "rq"
            systems[label] = {**info, "status": "ok", "runs": {}, "emq_mode": peer.emq_mode}
            peers[label] = peer
    result: dict[str, Any] = {"date": datetime.now().isoformat(timespec="seconds")}
    try:
        enq = {k: p for k, p in peers.items() if k != "emq-loop"}
        n1, nb = cfg["enqueue_one"], cfg["enqueue_bulk"]
        _repeat("enqueue one", args.runs, systems, enq, "enqueue_one",
                lambda _n, p, _i: measure.enqueue(p, server, False, n1))  # fmt: skip
        _repeat("enqueue bulk", args.runs, systems, enq, "enqueue_bulk",
                lambda _n, p, _i: measure.enqueue(p, server, True, nb))  # fmt: skip
        nm = cfg["memory_jobs"]
        _repeat("memory", args.memory_runs, systems, enq, "memory",
                lambda _n, p, _i: measure.memory(p, server, nm))  # fmt: skip
        for procs in (1, 2):

            def proc(name: str, p: Peer, i: int, procs: int = procs) -> dict[str, Any]:
                n = PROC_JOBS.get(name, PROC_DEFAULT)
                if args.quick:
                    n = max(200, n // 3)
                return measure.processing(
                    p, server, procs, n, cfg["proc_deadline_s"], f"proc{procs}-run{i + 1}"
                )

            _repeat(f"processing x{procs}", args.runs, systems, peers, f"proc_{procs}", proc)
        rate, seconds = cfg["latency_rate"], cfg["latency_s"]

        def lat(_name: str, p: Peer, i: int) -> dict[str, Any]:
            return measure.latency(p, server, rate, seconds, f"latency-run{i + 1}")

        _repeat("latency", args.runs, systems, peers, "latency", lat)
        result["raw"] = _raw(server, cfg, args.runs)
        if "emq" in args.systems:
            result["emq_only"] = {"sweep": _sweep(server, cfg, args.runs)}
    finally:
        server.stop()
    for s in systems.values():
        if s["status"] == "ok":  # keep an install's failure or a skip, with its reason
            _summarise(s)
    best = figures.best_peers(systems)
    result |= {
        "stem": stamp,
        "command": command,
        "git_head": _git_head(),
        "src_uncommitted": src_changes,
        "elapsed_s": time.monotonic() - T0,
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_start": list(load_start),
            "load_end": list(os.getloadavg()),
        },
        "server": server.info,
        "settings": {**cfg, "quick": args.quick, "runs": args.runs,
                     "memory_runs": args.memory_runs, "proc_jobs": PROC_JOBS,
                     "proc_default": PROC_DEFAULT, "venv": str(VENV),
                     "pythons": {k: str(peer_python(p.name)) for k, p in peers.items()
                                 if p.name not in NODE_PEERS}},
        "systems": systems,
        "best_peer": best,
    }  # fmt: skip
    result["ratios"] = figures.ratios(systems, best, result["raw"]["figures"])
    result["targets"] = figures.targets(result)
    path = report.write_json(result, stamp)
    png = report.RESULTS / f"{stamp}.png"
    report.chart(result, png)
    log(f"wrote {path} and {png}")
    full = not args.quick and not args.only and args.runs >= 3
    if (full or args.docs) and not args.no_docs:
        latest = report.RESULTS / "latest.png"
        latest.write_bytes(png.read_bytes())
        report.update_doc(result, "../benchmarks/results/latest.png")
        log(f"updated {report.DOC}")
    print(report.targets_table(result))
    print()
    print(report.values_table(result))
