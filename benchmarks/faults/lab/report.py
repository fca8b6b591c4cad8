"""The results: ``benchmarks/results/faults-<date>.json`` every run, and the tables in
``docs/reliability.md`` (between their markers) after a run of every system.

Everything the doc shows of a run is rendered here from the results file alone (:func:`table`),
so the doc traces exactly to its JSON: a cell (a system under one scenario and one server
setting) shows every run's figure, never one draw as the figure, and its verdict says in how
many of the runs each verdict came out."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import count
from .names import FSYNCS, NONE

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "benchmarks" / "results"
DOC = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- faults-table -->", "<!-- /faults-table -->"
QUICK_BEGIN, QUICK_END = "<!-- quick-figures -->", "<!-- /quick-figures -->"
SEVERITY = ["lost work", "duplicates", "missed ticks", "at least once", "clean"]
ONE_SCHEDULER = "needs exactly one scheduler process"
Rows = list[dict[str, Any]]


def write_json(doc: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M%S")
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    for n in range(1, 100):  # parts side by side may finish in the same second
        path = RESULTS / f"faults-{stamp}{'' if n == 1 else f'-{n}'}.json"
        try:
            with path.open("x") as out:
                out.write(text)
            return path
        except FileExistsError:
            continue
    raise SystemExit(f"{RESULTS}: too many results files named faults-{stamp}")


def _each(rows: Rows, key: str | Callable[[dict[str, Any]], Any]) -> str:
    """One figure per run, in run order (``0 / 5 / 1``), or one number when every run agrees."""
    get = key if callable(key) else (lambda r: r.get(key))
    vals = [get(r) for r in rows]
    return str(vals[0]) if len(set(vals)) == 1 else " / ".join(str(v) for v in vals)


def _unexplained(kind: str) -> Callable[[dict[str, Any]], int]:
    after = {"ran_twice": "ran_twice_after_fault", "callback_twice": "callback_twice_after_fault"}

    def get(r: dict[str, Any]) -> int:
        if f"{kind}_unexplained" in r:
            return int(r[f"{kind}_unexplained"])
        return int(r[kind]) - int(r.get(after[kind]) or 0)

    return get


def _twice(rows: Rows, kind: str) -> str:
    """``n ran twice``, and how many of them with no run on a worker the fault hit."""
    n, un = _each(rows, kind), _unexplained(kind)
    if not any(r[kind] for r in rows):
        return "0 ran twice"
    if not any(un(r) for r in rows):
        return f"{n} ran twice, each after the fault"
    return f"{n} ran twice, {_each(rows, un)} of them unexplained"


def measured(rows: Rows) -> str:
    """One cell: what its runs showed, in words a reader checks against the promise."""
    ok = [r for r in rows if r.get("status") == "ok"]
    failed = [r for r in rows if r.get("status") != "ok"]
    said = ""
    if failed:
        first = failed[0]
        said = (first.get("error") or first.get("status", "")).replace("|", "/")[:160]
        if not ok:
            return said
        said = f"; {len(failed)} of {len(rows)} runs failed: {said}"
    short = sum(1 for r in ok if (r.get("fault") or {}).get("producer"))
    if short:  # its producer missed its bound: fewer jobs acked than the size, none refused
        said = f"; the producer cut short in {short} of {len(ok)} runs{said}"
    scenario = ok[0]["scenario"]
    if scenario == "cron":
        missed = "" if ok[0].get("missed") is None else f", {_each(ok, 'missed')} missed"
        return f"{_each(ok, 'ticks')} ticks, **{_each(ok, 'ran_twice')} ran twice**{missed}{said}"
    if scenario == "fan-in":
        return (f"{_each(ok, 'groups')} fan-ins: **{_each(ok, 'callback_missed')} callbacks "
                f"missed**, **{_twice(ok, 'callback_twice')}**, "
                f"{_each(ok, 'children_unfinished')} children unfinished{said}")  # fmt: skip
    stale = "" if ok[0].get("stale_accepted") is None else (
        f", {_each(ok, 'stale_accepted')} stale accepted")  # fmt: skip
    if stale and ok[0].get("stale_refused") is not None:  # where the system shows its refusals
        stale += f" ({_each(ok, 'stale_refused')} refused)"
    return (f"{_each(ok, 'acked')} acked ({_each(ok, 'refused')} refused): "
            f"**{_each(ok, 'lost')} lost**, **{_each(ok, 'stuck')} stuck**, "
            f"{_twice(ok, 'ran_twice')}{stale}{said}")  # fmt: skip


def verdict(row: dict[str, Any]) -> str:
    """One run's verdict (docs/reliability.md, How counting works)."""
    if row.get("status") != "ok":
        return "-"
    if count.losses(row):
        return "lost work"
    if count.duplicates(row):
        return "duplicates"
    if row.get("missed"):
        return "missed ticks"
    return "at least once" if count.reruns(row) else "clean"


def limit(info: dict[str, Any], scenario: str) -> str:
    """What the system's docs require that ``scenario`` does not keep to, or ''."""
    if scenario == "cron" and info.get("schedulers") == "one":
        return f"{ONE_SCHEDULER}: {info.get('schedulers_doc') or 'its docs'}"
    return ""


def verdicts(rows: Rows, limited: bool = False) -> str:
    """A cell's verdict: one word when every run agrees, else each with its share of runs;
    where the scenario breaks a documented limit, its duplicates are the ones documented."""
    seen = [verdict(r) for r in rows if r.get("status") == "ok"]
    if not seen:
        return "-"
    words = sorted(set(seen), key=SEVERITY.index)
    if limited:
        words = ["duplicates, as its docs warn" if w == "duplicates" else w for w in words]
        seen = ["duplicates, as its docs warn" if w == "duplicates" else w for w in seen]
    if len(words) == 1:
        return words[0]
    return ", ".join(f"{w} ({seen.count(w)} of {len(seen)} runs)" for w in words)


def in_flight(rows: Rows) -> str:
    """Handler bodies in flight when the fault struck, per run (summed over a run's kills)."""
    faults = [r.get("fault") or {} for r in rows if r.get("status") == "ok"]
    if not faults or any("in_flight" not in f for f in faults):
        return "-"
    shown = _each([{"n": f["in_flight"]} for f in faults], "n")
    kills = {len(f["kills"]) for f in faults if f.get("kills")}
    return f"{shown} over {kills.pop()} kills" if len(kills) == 1 else shown


def server(rows: Rows) -> str:
    fsync = rows[0].get("fsync")
    if fsync is None:  # a results file from before the server settings were cells
        return str(rows[0].get("server", ""))
    text = "no persistence" if fsync == NONE else f"appendfsync {fsync}"
    if "cut back" in str(rows[0].get("server", "")):
        text += " (no compiler: the AOF cut back 1 s)"
    return text


def cells(s: dict[str, Any]) -> list[Rows]:
    """A system's rows grouped by cell (scenario, server setting), in the order they stand."""
    out: dict[tuple[str, Any], Rows] = {}
    for row in s.get("rows") or []:
        out.setdefault((row["scenario"], row.get("fsync")), []).append(row)
    return [sorted(rows, key=lambda r: r.get("run", 0)) for rows in out.values()]


def merged(paths: list[Path], order: list[str], same_sizes: bool = False) -> dict[str, Any]:
    """One document of several runs' results files (each a part of the episodes, run side by
    side to fit the time: each on its own servers), its systems in ``order``; refused unless
    every part is a full run (``same_sizes``: of the same sizes) of the same scenarios, seed
    and repeat."""
    parts = [json.loads(p.read_text()) for p in paths]
    first = parts[0]
    same = ("scenarios", "seed", "repeat")
    for part, path in zip(parts, paths, strict=True):
        sized = part["quick"] == first["quick"] if same_sizes else not part["quick"]
        if not sized or any(part.get(k) != first.get(k) for k in same):
            raise SystemExit(f"{path}: not a run of the same sizes, scenarios, seed and repeat")
    systems: dict[str, dict[str, Any]] = {}
    for part in parts:  # a system's episodes may have run in several parts
        for name, s in part["systems"].items():
            into = systems.setdefault(name, {**s, "rows": []})
            into.update({k: v for k, v in s.items() if k != "rows"})
            into["rows"] += s.get("rows") or []
    place = {name: i for i, name in enumerate(first["scenarios"])}
    fsyncs = {f: i for i, f in enumerate([NONE, *FSYNCS])}
    for s in systems.values():
        s["rows"].sort(
            key=lambda row: (
                place.get(row["scenario"], len(place)),
                fsyncs.get(row.get("fsync"), 0),
                row.get("run", 0),
            )
        )
        if s["rows"]:
            s.pop("error", None)  # a part that could run it ran it
    doc = dict(parts[-1])
    doc["systems"] = {n: systems[n] for n in order if n in systems}
    doc["commands"] = [part["command"] for part in parts]
    doc["files"] = [part.get("file") or path.name for part, path in zip(parts, paths, strict=True)]
    doc["date"] = max(part["date"] for part in parts)
    return doc


def _head(doc: dict[str, Any]) -> str:
    commands = doc.get("commands") or [doc["command"]]
    files = doc.get("files") or [doc["file"]]
    shown = " and ".join(f"`{c}`" for c in commands)
    if len(commands) > 1:
        shown = f"{len(commands)} runs side by side, each on its own servers ({shown})"
    raw = ", ".join(f"`benchmarks/results/{f}`" for f in files)
    repeat = int(doc.get("repeat") or 1)
    seeds = ", ".join(str(doc["seed"] + 1000 * r) for r in range(repeat))
    runs = (
        f"every cell run {repeat} times, seeds {seeds}, each run's figure shown in "
        f"that order where they differ"
        if repeat > 1
        else f"one run, seed {seeds}"
    )
    took = ""
    if doc.get("duration_s"):
        parts = f" in {doc['parallel']} parts side by side" if doc.get("parallel") else ""
        took = f"; the whole run took {doc['duration_s'] / 60:.0f} min{parts}"
    return (f"Measured {doc['date']} with {shown} ({'quick' if doc['quick'] else 'full'} "
            f"sizes, {runs}{took}; raw figures: {raw}).{_sizes(doc.get('sizes'))}\n\n")  # fmt: skip


def _sizes(z: dict[str, Any] | None) -> str:
    """The episode sizes docs/reliability.md names by their fields, with their values."""
    if not z:
        return ""
    return (f" Sizes: {z['workers']} workers of concurrency {z['concurrency']}, started "
            f"{z['warmup_s']:g} s ahead; {z['jobs']} jobs at {z['rate']:g}/s, each a "
            f"{z['job_ms']} ms body; {z['kills']} kills; a {z['cut_s']:g} s cut; "
            f"{z['oom_s']:g} s out of memory; cron for {z['cron_s']:g} s; {z['groups']} fan-ins "
            f"of {z['width']}; a margin of {z['margin_s']:g} s.")  # fmt: skip


def _figures(rows: Rows, word: str) -> str:
    """The figures behind a verdict word, for the summary: the counts that made it."""
    ok = [r for r in rows if r.get("status") == "ok"]
    shown: list[tuple[str, Any]] = []
    if word == "lost work":
        shown = [
            (k.replace("_", " "), k)
            for k in ("lost", "stuck", "stale_accepted", "callback_missed", "children_unfinished")
        ]
    elif word == "duplicates" and ok[0]["scenario"] == "cron":
        shown = [("ticks ran twice", "ran_twice")]
    elif word == "duplicates":
        shown = [
            (f"{k.replace('_', ' ')} unexplained", _unexplained(k))
            for k in ("ran_twice", "callback_twice")
            if k in ok[0]
        ]
    elif word == "missed ticks":
        shown = [("ticks missed", "missed")]
    get = lambda key: key if callable(key) else (lambda r: r.get(key))  # noqa: E731
    return ", ".join(f"{_each(ok, key)} {label}" for label, key in shown
                     if any(get(key)(r) for r in ok))  # fmt: skip


def summary(doc: dict[str, Any]) -> str:
    """One line per system: the cells where it lost or repeated work, with their figures."""
    lines = []
    for name, s in doc["systems"].items():
        info = s.get("info") or {}
        bad = []
        for rows in cells(s):
            each = {verdict(r) for r in rows if r.get("status") == "ok"}
            if each <= {"clean", "at least once"}:  # no run lost or repeated work
                continue
            said = verdicts(rows, bool(limit(info, rows[0]["scenario"])))
            worst = next(w for w in SEVERITY if w in each)
            where = rows[0]["scenario"] + ("" if rows[0].get("fsync") in (None, NONE)
                                           else f" ({server(rows)})")  # fmt: skip
            bad.append(f"{where}: {said}: {_figures(rows, worst)}")
        if not s.get("rows"):
            lines.append(f"- **{name}**: not measured: {s.get('error', '')}")
        elif bad:
            lines.append(f"- **{name}**: " + "; ".join(bad) + "; every other cell clean or "
                         "at least once.")  # fmt: skip
        else:
            lines.append(f"- **{name}**: every cell clean or at least once.")
    return "\n".join(lines) + "\n"


def table(doc: dict[str, Any]) -> str:
    """The head, the summary and the table of one results file: all the doc shows of a run."""
    lines = ["| system | scenario | server | what it promises | in flight at the fault "
             "| measured | verdict | what its docs require |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in doc["systems"].items():
        info = s.get("info") or {}
        promise = info.get("promise") or ""
        groups = cells(s) or [[{"scenario": "all", "status": s.get("error", "")}]]
        for i, rows in enumerate(groups):
            said = _cell(promise) if i == 0 else "(as above)"
            scenario = rows[0]["scenario"]
            status = str(rows[0].get("status", ""))
            shown = status if status.startswith("not run") else measured(rows)
            need = limit(info, scenario)
            lines.append(f"| {name} | {scenario} | {_cell(server(rows))} | {said} | "
                         f"{in_flight(rows)} | {_cell(shown)} | {verdicts(rows, bool(need))} "
                         f"| {_cell(need)} |")  # fmt: skip
    return _head(doc) + summary(doc) + "\n" + "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "/")


def write_doc(doc: dict[str, Any], quick: bool | None = None, path: Path = DOC) -> None:
    """Replace what stands between the markers of the run's table (the full one, or with
    ``quick`` the quick one) in docs/reliability.md with :func:`table`."""
    quick = bool(doc.get("quick")) if quick is None else quick
    begin, end_marker = (QUICK_BEGIN, QUICK_END) if quick else (BEGIN, END)
    text = path.read_text()
    start, end = text.index(begin) + len(begin), text.index(end_marker)
    path.write_text(text[:start] + "\n" + table(doc) + text[end:])
