"""``emq race``: the race lab (atomic vs naive stalled recovery) on a real server.

``emq race [SCENARIO] [--mode atomic|naive|both]`` runs the seed's scenarios (all four by
default) and draws each as sweep A | sweep B, one row per command with the server's reply,
then the readout. ``emq race explore`` runs every interleaving; ``emq race stress`` races
real processes. ``explore`` and ``stress`` exit 1 if the atomic form shows any anomaly.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import redis
from rich import box
from rich.table import Table
from rich.text import Text

from ..racelab.explorer import COLUMNS, Tally, explore
from ..racelab.forms import MODES
from ..racelab.scenarios import SCENARIOS, Outcome, modes, run_scenario
from ..racelab.stress import StressResult, stress
from .common import (
    connect,
    console,
    emit_json,
    json_option,
    line,
    resolve_url,
    say,
    show,
    url_option,
)
from .exits import DONE, NO

MODE_CHOICE = click.Choice([*MODES, "both"])
HEADERS = {
    "recovered_twice": "recovered twice",
    "lost_increment": "lost an increment",
    "delivered_twice": "delivered twice",
    "in_two_sets": "in two sets",
    "in_none": "in none",
    "lost_increments": "lost increments",
    "left_in_two_sets": "left in two sets",
    "left_in_none": "left in none",
}


class RaceGroup(click.Group):
    """A group whose first argument may be a scenario: ``emq race two-sweeps`` runs
    ``emq race run two-sweeps``, and a bare ``emq race`` runs every scenario."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=RaceGroup)
def race() -> None:
    """The race lab: emq's one-script stalled recovery against the naive round-trip loop.

    emq race [SCENARIO] is short for emq race run [SCENARIO].
    """


def _client(url: str | None) -> redis.Redis:
    """A client that has answered one PING (so a wrong endpoint fails before any output)."""
    client = connect(resolve_url(url))
    try:
        client.ping()
    except BaseException:
        client.close()
        raise
    return client


def _reply(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def picture(outcome: Outcome) -> Table:
    """Sweep A | sweep B (and, when a worker takes part, the workers), one row per command:
    the step, the command and the server's reply, with the queue's key prefix left out and
    the job's id shown as J."""
    r = outcome.result
    prefix = f"emq:{{{r.queue}}}:"
    workers = list(dict.fromkeys(s.actor for s in r.steps if s.actor.startswith("W")))
    columns = sorted({s.actor for s in r.steps} - set(workers)) + (["W"] if workers else [])
    table = Table(
        title=Text(f"{outcome.scenario} · {r.mode}"),
        caption=Text(f"keys without their prefix {prefix}   J = {r.job}"),
        show_lines=True,
    )
    for column in columns:
        title = f"sweep {column}" if column != "W" else f"worker{'s' if len(workers) > 1 else ''}"
        table.add_column(Text(title), overflow="fold", ratio=1)
    for step in r.steps:
        column = "W" if step.actor in workers else step.actor
        who = f"{step.actor} " if column == "W" and len(workers) > 1 else ""
        text = f"{step.command.replace(prefix, '')} -> {_reply(step.reply)}"
        cell = line((f"{who}{step.step}", "bold"), " ", text.replace(r.job, "J"))
        table.add_row(*(cell if c == column else Text() for c in columns))
    return table


def readout_line(outcome: Outcome) -> Text:
    d = outcome.as_dict()
    numbers = (
        f"recover_count {d['recover_count']} · stalled {d['stalled']} "
        f"(expected {d['expected_stalled']}) · lost_increments {d['lost_increments']} · "
        f"double_delivered {str(d['double_delivered']).lower()}"
    )
    return line(("readout", "bold"), f" · {outcome.readout}\n", (numbers, "dim"))


@race.command("run")
@click.argument("scenario", required=False, type=click.Choice(list(SCENARIOS)))
@click.option("--mode", type=MODE_CHOICE, default="both", show_default=True, help="Which form.")
@url_option
@json_option
def run_cmd(scenario: str | None, mode: str, url: str | None, as_json: bool) -> None:
    """Run SCENARIO (default: all four) and show each command with the server's reply.

    With --json, one object per scenario and mode, one per line."""
    client = _client(url)
    names = [scenario] if scenario else list(SCENARIOS)
    try:
        for name in names:
            if not as_json:
                console.rule(line((name, "bold"), f": {SCENARIOS[name].summary}"))
            for m in modes(mode):
                outcome = run_scenario(client, name, m)
                if as_json:
                    emit_json(outcome.as_dict())
                else:
                    show(picture(outcome), fit=True)
                    console.print(readout_line(outcome))
                    console.print()
    finally:
        client.close()


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.0f}%)" if total else str(count)


TITLES = {
    "atomic": "atomic form: sweep_stalled.lua, one EVALSHA per sweep",
    "naive": "naive form: the round-trip loop (the cautionary contrast)",
}


def explore_table(mode: str, rows: list[Tally]) -> Table:
    """One form's table: a row per actor set, a column per anomaly."""
    table = Table(title=Text(TITLES[mode]), box=box.SIMPLE_HEAD)
    table.add_column("actors", no_wrap=True)
    table.add_column(_two_lines("interleavings run"), justify="right", min_width=13)
    for column in COLUMNS:
        table.add_column(_two_lines(HEADERS[column]), justify="right")
    for row in rows:
        cells = [str(row.counts[c]) for c in COLUMNS]
        table.add_row(_who(row), str(row.interleavings), *cells)
    return table


def _two_lines(header: str) -> str:
    """``lost an increment`` as ``lost an`` over ``increment``, so the table fits 80 columns."""
    head, _, last = header.rpartition(" ")
    return f"{head}\n{last}" if head else header


def _who(row: Tally) -> str:
    return row.actors.replace(",", "")


@race.command("explore")
@click.option("--mode", type=MODE_CHOICE, default="both", show_default=True, help="Which form.")
@url_option
@json_option
def explore_cmd(mode: str, url: str | None, as_json: bool) -> None:
    """Run every interleaving of two sweeps (and of two sweeps with a claiming worker)."""
    client = _client(url)
    try:
        rows = explore(client, modes(mode))
    finally:
        client.close()
    if as_json:
        emit_json({"rows": [row.as_dict() for row in rows]})
    else:
        for m in dict.fromkeys(row.mode for row in rows):
            show(explore_table(m, [row for row in rows if row.mode == m]))
        say(
            (
                "in two sets / in none: after some step the job was in both pending and "
                "active, or in neither. W2 claims after every interleaving with W.",
                "dim",
            )
        )
        for row in rows:
            for column in COLUMNS:
                if column in row.examples:
                    share = _share(row.counts[column], row.interleavings)
                    say(
                        f"{row.mode} {_who(row)}: {HEADERS[column]} {share}, first: ",
                        (row.examples[column], "dim"),
                    )
    atomic_dirty = any(not row.clean for row in rows if row.mode == "atomic")
    sys.exit(NO if atomic_dirty else DONE)


def stress_table(rows: list[StressResult]) -> Table:
    """A column per form, a row per figure; anomalies as count (per 10,000 recoveries)."""
    first = rows[0]
    table = Table(
        title=Text(
            f"{first.procs} processes x {first.seconds:g} s per form over {first.jobs} jobs, "
            "no forced schedule"
        ),
        box=box.SIMPLE_HEAD,
    )
    table.add_column("count (per 10,000 recoveries)")
    for r in rows:
        table.add_column(f"{r.mode}", justify="right")
    table.add_row("claim-recover-lapse loops", *(str(r.iterations) for r in rows))
    table.add_row("recoveries", *(str(r.recoveries) for r in rows))
    table.add_row("leases lapsed", *(str(r.lapses) for r in rows))
    for name in StressResult.ANOMALIES:
        cells = [f"{getattr(r, name)} ({r.per_10k(name):.1f})" for r in rows]
        table.add_row(HEADERS[name], *cells)
    return table


@race.command("stress")
@click.option("--procs", type=int, default=4, show_default=True, help="Processes racing.")
@click.option("--seconds", type=float, default=3.0, show_default=True, help="Per form.")
@click.option("--jobs", type=int, default=8, show_default=True, help="Jobs whose leases lapse.")
@click.option("--mode", type=MODE_CHOICE, default="both", show_default=True, help="Which form.")
@url_option
@json_option
def stress_cmd(
    procs: int, seconds: float, jobs: int, mode: str, url: str | None, as_json: bool
) -> None:
    """Race N processes claiming, recovering and letting leases lapse, for S seconds."""
    resolved = resolve_url(url)
    rows = [stress(resolved, m, procs=procs, seconds=seconds, jobs=jobs) for m in modes(mode)]
    if as_json:
        emit_json({"rows": [r.as_dict() for r in rows]})
    else:
        show(stress_table(rows))
    sys.exit(NO if any(not r.clean for r in rows if r.mode == "atomic") else DONE)


def register(group: click.Group) -> None:
    group.add_command(race)
