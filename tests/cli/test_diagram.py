"""The state diagram in docs/flows.md is scripts/diagram.py's output from src/emq/model/states.py:
a stale diagram fails here. The generator's rules are checked on small tables of its own."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emq.model.states import JobState

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "diagram.py"
P, S, A, D, W = (JobState.PENDING, JobState.SCHEDULED, JobState.ACTIVE, JobState.DEAD,
                 JobState.WAITING)  # fmt: skip


def load() -> Any:
    spec = importlib.util.spec_from_file_location("diagram", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_diagram_in_the_docs_is_up_to_date() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_edges_merge_new_and_gone_are_outside_and_releases_are_added() -> None:
    d = load()
    table = {
        "enqueue": (frozenset(), frozenset({P, S})),
        "claim": (frozenset({P, S}), frozenset({A})),
        "fail": (frozenset({A}), frozenset({S, D})),
        "sweep_stalled": (frozenset({A}), frozenset({P, D})),
        "remove": (frozenset({P, D}), frozenset()),
        "deliver_flow": (frozenset({W}), frozenset({P, D})),
        "cancel": (frozenset({P, A}), frozenset({D, A})),
    }
    got = {(src, dst): label for src, dst, label in d.edges(table)}
    assert got[("[*]", "pending")] == "enqueue" and got[("[*]", "scheduled")] == "enqueue"
    assert got[("active", "dead")] == "fail, sweep_stalled"  # not cancel: NOT_EDGES
    assert got[("pending", "dead")] == "cancel" and got[("active", "active")] == "cancel"
    assert ("pending", "active") in got and got[("pending", "active")] == "claim"
    assert got[("pending", "[*]")] == "remove" and got[("dead", "[*]")] == "remove"
    assert got[("waiting", "pending")] == "deliver_flow, last child finished"
    assert got[("waiting", "dead")] == "deliver_flow, child died (fail_parent)"
    text = d.mermaid(table)
    assert text.startswith("```mermaid\nstateDiagram-v2\n") and text.endswith("\n```")
    assert "    active --> dead: fail, sweep_stalled\n" in text


def test_the_block_is_rewritten_between_its_markers_only() -> None:
    d = load()
    table: dict[str, tuple[frozenset[JobState], frozenset[JobState]]] = {
        "enqueue": (frozenset(), frozenset({P}))
    }
    doc = f"# T\n\nbefore\n\n{d.BEGIN}\nold\n{d.END}\n\nafter\n"
    new = d.rewrite(doc, table)
    assert new.startswith("# T\n\nbefore\n\n<!-- states:begin -->\n")
    assert new.endswith("<!-- states:end -->\n\nafter\n") and "old" not in new
    assert "[*] --> pending: enqueue" in new and d.rewrite(new, table) == new
    assert d.stale_exclusions(table) == sorted(d.NOT_EDGES)  # none of them is in this table


def test_check_fails_on_a_stale_block_and_says_how_to_fix_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = load()
    d.DOC = tmp_path / "flows.md"  # this module's own copy: the real docs are not touched
    d.DOC.write_text(f"# T\n\n{d.BEGIN}\nstale\n{d.END}\n", encoding="utf-8")
    assert d.main(["--check"]) == 1
    assert "run: python scripts/diagram.py" in capsys.readouterr().out
    assert d.main([]) == 0 and d.main(["--check"]) == 0
    assert "stale" not in d.DOC.read_text(encoding="utf-8")
    assert d.main(["--bogus"]) == 2
