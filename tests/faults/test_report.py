"""What docs/reliability.md shows of a run is rendered from its results file alone: a cell per
system, scenario and server setting, every run's figure where the runs differ (never one draw
as the figure), the verdict with its share of runs, the bodies in flight at the fault, and a
documented limit (one scheduler process) in its own column. No server: a given JSON in, the
table out; and the committed doc is exactly what its cited JSON renders to."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

FAULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "faults"
sys.path.insert(0, str(FAULTS))

from lab import report  # noqa: E402

CELERY_DOC = "'only a single scheduler' (docs.celeryq.dev, Periodic Tasks)"


def _jobs(run: int, fsync: str, **counts: Any) -> dict[str, Any]:
    base = {"system": "q", "scenario": "power-loss", "fsync": fsync, "run": run,
            "seed": 1 + 1000 * run, "status": "ok", "acked": 300, "refused": 0, "lost": 0,
            "stuck": 0, "ran_twice": 0, "ran_twice_after_fault": 0, "ran_twice_unexplained": 0,
            "stale_accepted": None, "server": f"appendonly yes, appendfsync {fsync}",
            "fault": {"in_flight": 2}}  # fmt: skip
    return base | counts


def _doc() -> dict[str, Any]:
    kills = [{"at_s": 1.0}] * 8
    q_rows = [
        *(_jobs(r, "-", scenario="worker-sigkill", server="no persistence",
                fault={"kills": kills, "in_flight": n}, ran_twice=t, ran_twice_after_fault=t)
          for r, (n, t) in enumerate([(9, 1), (8, 0), (11, 2)])),
        *(_jobs(r, "everysec", lost=lost, acked=acked,
                fault={"in_flight": 2, **({"producer": "killed"} if r == 2 else {})})
          for r, (lost, acked) in enumerate([(0, 290), (5, 291), (1, 290)])),
        *(_jobs(r, "always") for r in range(3)),
        *({"system": "q", "scenario": "cron", "fsync": "-", "run": r, "seed": 1 + 1000 * r,
           "status": "ok", "server": "no persistence", "ticks": 12, "ran_twice": 12,
           "missed": 0, "fault": {"schedulers": 2}} for r in range(3)),
        {"system": "q", "scenario": "fan-in", "fsync": "-", "run": 0, "seed": 1,
         "status": "not run: q has no fan-in"},
    ]  # fmt: skip
    return {"date": "2026-12-04 10:00 UTC", "command": "python3 benchmarks/faults/run.py",
            "file": "faults-x.json", "quick": False, "seed": 1, "repeat": 3, "parallel": 16,
            "duration_s": 1500.0,
            "systems": {"q": {"info": {"promise": "at least once", "schedulers": "one",
                                       "schedulers_doc": CELERY_DOC}, "rows": q_rows}}}  # fmt: skip


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    out = {}
    for line in text.splitlines():
        if line.startswith("| q |"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[(cells[1], cells[2])] = cells
    return out


def test_a_cell_shows_every_runs_figure_where_they_differ_and_each_verdicts_share() -> None:
    rows = _rows(report.table(_doc()))
    lost = rows[("power-loss", "appendfsync everysec")]
    assert lost[4] == "2"  # in flight at the fault: every run agrees
    assert lost[5] == ("290 / 291 / 290 acked (0 refused): **0 / 5 / 1 lost**, **0 stuck**, "
                       "0 ran twice; the producer cut short in 1 of 3 runs")  # fmt: skip
    assert lost[6] == "lost work (2 of 3 runs), clean (1 of 3 runs)"
    kept = rows[("power-loss", "appendfsync always")]
    assert kept[5] == "300 acked (0 refused): **0 lost**, **0 stuck**, 0 ran twice"
    assert kept[6] == "clean"
    kill = rows[("worker-sigkill", "no persistence")]
    assert kill[4] == "9 / 8 / 11 over 8 kills"
    assert "1 / 0 / 2 ran twice, each after the fault" in kill[5]
    assert kill[6] == "at least once (2 of 3 runs), clean (1 of 3 runs)"


def test_a_durable_scenario_has_a_row_per_server_setting_and_the_rest_one() -> None:
    rows = _rows(report.table(_doc()))
    assert list(rows) == [("worker-sigkill", "no persistence"),
                          ("power-loss", "appendfsync everysec"),
                          ("power-loss", "appendfsync always"),
                          ("cron", "no persistence"), ("fan-in", "no persistence")]  # fmt: skip
    assert rows[("fan-in", "no persistence")][5] == "not run: q has no fan-in"


def test_two_schedulers_where_the_docs_allow_one_say_so_in_their_own_column() -> None:
    text = report.table(_doc())
    rows = _rows(text)
    cron = rows[("cron", "no persistence")]
    assert cron[6] == "duplicates, as its docs warn"
    assert cron[7] == f"needs exactly one scheduler process: {CELERY_DOC}"
    assert all(r[7] == "" for k, r in rows.items() if k[0] != "cron")
    plain = _doc()
    plain["systems"]["q"]["info"] = {"promise": "at least once"}
    cron = _rows(report.table(plain))[("cron", "no persistence")]
    assert (cron[6], cron[7]) == ("duplicates", "")


def test_the_head_and_the_summary_are_rendered_from_the_json() -> None:
    text = report.table(_doc())
    head, summary = text.split("\n\n")[:2]
    assert head == (
        "Measured 2026-12-04 10:00 UTC with `python3 benchmarks/faults/run.py` (full sizes, "
        "every cell run 3 times, seeds 1, 1001, 2001, each run's figure shown in that order "
        "where they differ; the whole run took 25 min in 16 parts side by side; raw figures: "
        "`benchmarks/results/faults-x.json`)."
    )
    assert summary == (
        "- **q**: power-loss (appendfsync everysec): lost work (2 of 3 runs), clean (1 of 3 "
        "runs): 0 / 5 / 1 lost; cron: duplicates, as its docs warn: 12 ticks ran twice; "
        "every other cell clean or at least once."
    )


def test_write_doc_replaces_only_its_own_block(tmp_path: Path) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text(f"intro\n{report.QUICK_BEGIN}\nold quick\n{report.QUICK_END}\nmiddle\n"
                   f"{report.BEGIN}\nold full\n{report.END}\nend\n")  # fmt: skip
    report.write_doc(_doc(), path=doc)
    text = doc.read_text()
    assert "old quick" in text and "old full" not in text
    assert text.endswith(f"{report.END}\nend\n") and report.table(_doc()) in text


def _blocks() -> list[tuple[str, str]]:
    """Each generated block of docs/reliability.md: (its marker, what stands inside)."""
    text = report.DOC.read_text()
    out = []
    for begin, end in ((report.QUICK_BEGIN, report.QUICK_END), (report.BEGIN, report.END)):
        out.append((begin, text[text.index(begin) + len(begin) : text.index(end)]))
    return out


def test_the_committed_doc_is_exactly_what_its_results_files_render_to() -> None:
    for begin, block in _blocks():
        cited = re.findall(r"`benchmarks/results/(faults-[^`]+\.json)`", block.split("\n\n")[0])
        assert cited, f"{begin}: the block cites no results file"
        paths = [report.RESULTS / name for name in cited]
        doc = json.loads(paths[0].read_text()) if len(paths) == 1 else None
        if doc is None:  # several parts joined by --merge
            doc = report.merged(paths, list(json.loads(paths[0].read_text())["systems"]))
        assert block == "\n" + report.table(doc), f"{begin}: not what {cited} renders to"


def test_the_adapters_that_declare_one_scheduler_quote_their_docs() -> None:
    declared = {}
    for path in sorted((FAULTS / "systems").glob("*.py")):
        body = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign)]
        consts = {t.id: n.value for n in body for t in n.targets if isinstance(t, ast.Name)}
        if "SCHEDULERS" in consts:
            doc = consts.get("SCHEDULERS_DOC")
            assert isinstance(doc, ast.Constant) and "(" in doc.value, path.name
            declared[path.stem] = ast.literal_eval(consts["SCHEDULERS"])
        assert "APPENDFSYNC" not in consts, f"{path.name}: the scenario sets the server"
    assert declared == {"celery": "one", "huey": "one", "taskiq": "one"}
