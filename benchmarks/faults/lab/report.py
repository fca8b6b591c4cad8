"""The results: ``benchmarks/results/faults-<date>.json`` every run, and the table in
``docs/reliability.md`` (between its markers) after a full run."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import count

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "benchmarks" / "results"
DOC = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- faults-table -->", "<!-- /faults-table -->"


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


def measured(row: dict[str, Any]) -> str:
    """One cell: what the episode showed, in words a reader checks against the promise."""
    status = row.get("status", "")
    if status != "ok":
        return (row.get("error") or status).replace("|", "/")[:160]
    if row["scenario"] == "cron":
        missed = "" if row.get("missed") is None else f", {row['missed']} missed"
        return f"{row['ticks']} ticks, **{row['ran_twice']} ran twice**{missed}"
    if row["scenario"] == "fan-in":
        twice = _twice(row["callback_twice"], row.get("callback_twice_after_fault"))
        return (f"{row['groups']} fan-ins: **{row['callback_missed']} callbacks missed**, "
                f"**{twice}**, {row['children_unfinished']} children unfinished")  # fmt: skip
    stale = "" if row.get("stale_accepted") is None else (
        f", {row['stale_accepted']} stale accepted ({row['stale_refused']} refused)")  # fmt: skip
    twice = _twice(row["ran_twice"], row.get("ran_twice_after_fault"))
    return (f"{row['acked']} acked ({row['refused']} refused): **{row['lost']} lost**, "
            f"**{row['stuck']} stuck**, {twice}{stale}")  # fmt: skip


def _twice(n: int, after_fault: int | None) -> str:
    """``n ran twice``, and how many of them after the fault (a run on a worker it hit)."""
    if not n or after_fault is None:
        return f"{n} ran twice"
    if after_fault == n:
        return f"{n} ran twice, each after the fault"
    return f"{n} ran twice, {after_fault} of them after the fault"


def verdict(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return "-"
    lost, twice = count.losses(row), count.duplicates(row)
    if lost:
        return "lost work"
    if twice:
        return "duplicates"
    if row.get("missed"):
        return "missed ticks"
    return "at least once" if count.reruns(row) else "clean"


def merged(paths: list[Path], order: list[str], same_sizes: bool = False) -> dict[str, Any]:
    """One document of several runs' results files (each a part of the systems, run side by
    side to fit the time: each on its own servers), its systems in ``order``; refused unless
    every part is a full run (``same_sizes``: of the same sizes) of the same scenarios and
    seed."""
    parts = [json.loads(p.read_text()) for p in paths]
    first = parts[0]
    for part, path in zip(parts, paths, strict=True):
        sized = part["quick"] == first["quick"] if same_sizes else not part["quick"]
        if not sized or part["scenarios"] != first["scenarios"] or part["seed"] != first["seed"]:
            raise SystemExit(f"{path}: not a run of the same sizes, scenarios and seed")
    systems: dict[str, dict[str, Any]] = {}
    for part in parts:  # a system's episodes may have run in several parts
        for name, s in part["systems"].items():
            into = systems.setdefault(name, {**s, "rows": []})
            into.update({k: v for k, v in s.items() if k != "rows"})
            into["rows"] += s.get("rows") or []
    place = {name: i for i, name in enumerate(first["scenarios"])}
    for s in systems.values():
        s["rows"].sort(key=lambda row: place.get(row["scenario"], len(place)))
        if s["rows"]:
            s.pop("error", None)  # a part that could run it ran it
    doc = dict(parts[-1])
    doc["systems"] = {n: systems[n] for n in order if n in systems}
    doc["commands"] = [part["command"] for part in parts]
    doc["files"] = [part.get("file") or path.name for part, path in zip(parts, paths, strict=True)]
    doc["date"] = max(part["date"] for part in parts)
    return doc


def table(doc: dict[str, Any]) -> str:
    commands = doc.get("commands") or [doc["command"]]
    files = doc.get("files") or [doc["file"]]
    shown = " and ".join(f"`{c}`" for c in commands)
    if len(commands) > 1:
        shown = f"{len(commands)} runs side by side, each on its own servers ({shown})"
    raw = ", ".join(f"`benchmarks/results/{f}`" for f in files)
    head = (f"Measured {doc['date']} with {shown} (seed {doc['seed']}, "
            f"{'quick' if doc['quick'] else 'full'} sizes; raw figures: {raw}).\n\n")  # fmt: skip
    lines = ["| system | scenario | what it promises | server | measured | verdict |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in doc["systems"].items():
        promise = (s.get("info") or {}).get("promise") or ""
        rows = s.get("rows") or [{"scenario": "all", "status": s.get("error", "")}]
        for i, row in enumerate(rows):
            said = _cell(promise) if i == 0 else "(as above)"
            shown = row["status"] if str(row.get("status", "")).startswith("not run") else (
                measured(row))  # fmt: skip
            lines.append(f"| {name} | {row['scenario']} | {said} | {_cell(row.get('server', ''))}"
                         f" | {_cell(shown)} | {verdict(row)} |")  # fmt: skip
    return head + "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "/")


def write_doc(doc: dict[str, Any], begin: str = BEGIN, end_marker: str = END) -> None:
    """Replace what stands between the markers in docs/reliability.md with the table."""
    text = DOC.read_text()
    start, end = text.index(begin) + len(begin), text.index(end_marker)
    DOC.write_text(text[:start] + "\n" + table(doc) + text[end:])
