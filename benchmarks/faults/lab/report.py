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
    path = RESULTS / f"faults-{stamp}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def measured(row: dict[str, Any]) -> str:
    """One cell: what the episode showed, in words a reader checks against the promise."""
    status = row.get("status", "")
    if status != "ok":
        return (row.get("error") or status).replace("|", "/")[:160]
    if row["scenario"] == "cron":
        missed = "" if row.get("missed") is None else f", {row['missed']} missed"
        return f"{row['ticks']} ticks, **{row['ran_twice']} ran twice**{missed}"
    if row["scenario"] == "fan-in":
        return (f"{row['groups']} fan-ins: **{row['callback_missed']} callbacks missed**, "
                f"**{row['callback_twice']} ran twice**, {row['children_unfinished']} "
                f"children unfinished")  # fmt: skip
    stale = "" if row.get("stale_accepted") is None else (
        f", {row['stale_accepted']} stale accepted ({row['stale_refused']} refused)")  # fmt: skip
    return (f"{row['acked']} acked ({row['refused']} refused): **{row['lost']} lost**, "
            f"**{row['stuck']} stuck**, {row['ran_twice']} ran twice{stale}")  # fmt: skip


def verdict(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return "-"
    lost, twice = count.losses(row), count.duplicates(row)
    if lost:
        return "lost work"
    return "duplicates" if twice else "clean"


def table(doc: dict[str, Any]) -> str:
    head = (f"Measured {doc['date']} with `{doc['command']}` (seed {doc['seed']}, "
            f"{'quick' if doc['quick'] else 'full'} sizes; raw figures: "
            f"`benchmarks/results/{doc['file']}`).\n\n")  # fmt: skip
    lines = ["| system | scenario | what it promises | measured | verdict |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name, s in doc["systems"].items():
        promise = (s.get("info") or {}).get("promise") or s.get("error") or ""
        for row in s.get("rows", []):
            if str(row.get("status", "")).startswith("not run"):
                lines.append(f"| {name} | {row['scenario']} | {_cell(promise)} | "
                             f"{_cell(row['status'])} | - |")  # fmt: skip
                continue
            lines.append(f"| {name} | {row['scenario']} | {_cell(promise)} | "
                         f"{_cell(measured(row))} | {verdict(row)} |")  # fmt: skip
        if not s.get("rows"):
            lines.append(f"| {name} | all | {_cell(promise)} | {_cell(s.get('error', ''))} | - |")
    return head + "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "/")


def write_doc(doc: dict[str, Any]) -> None:
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + table(doc) + text[end:])
