"""The smaller promises of the CLI (docs/cli.md), each through the real ``emq`` command: long values
cut in errors, payloads from stdin or a file, ``--floor`` typos refused, no wrapping when output is
not a terminal, one line per event, JSON lines from ``history``, help on every option, ``--json`` on
every command, and both names of the scheduled state."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from emq import Queue, Worker, WorkerOptions
from emq.cli.main import cli

LONG = "a" * 100_000


def invoke(*args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input)


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "q", LONG],
        ["enqueue", "q", "x", "null", "--key", LONG],
        ["stats", LONG],
        ["job", "q", LONG],
        ["jobs", "q", LONG],
        ["dead", "q", "redrive", LONG],
        ["events", "tail", "q", "--after", LONG],
        ["enqueue", "q", "x", LONG],
    ],
    ids=["queue", "key", "stats", "job-id", "choice", "redrive-id", "after", "payload"],
)
def test_a_100_kb_value_is_cut_in_the_error_line(url: str, args: list[str]) -> None:
    result = invoke(*args, "--url", url)
    line = one_error_line(result)
    assert len(line) < 400, line[:500]


def test_a_large_payload_from_stdin_and_from_a_file(url: str, qname: str, tmp_path: Path) -> None:
    """Over ~128 KB a payload cannot be one argv string (Linux's MAX_ARG_STRLEN); ``-`` reads
    stdin, ``@PATH`` reads a file."""
    big = {"blob": "x" * 200_000, "note": "über"}
    text = json.dumps(big)
    made = invoke("enqueue", qname, "big", "-", "--url", url, "--json", input=text.encode())
    assert made.exit_code == 0, made.output
    path = tmp_path / "payload.json"
    path.write_text(text, encoding="utf-8")
    again = invoke("enqueue", qname, "big", f"@{path}", "--url", url, "--json")
    assert again.exit_code == 0, again.output
    for out in (made, again):
        job_id = json.loads(out.output)["id"]
        shown = invoke("job", qname, job_id, "--url", url, "--json")
        assert json.loads(shown.output)["payload"] == big
    missing = one_error_line(
        invoke("enqueue", qname, "big", f"@{tmp_path}/nope.json", "--url", url)
    )
    assert "cannot read payload file" in missing
    bad = one_error_line(invoke("enqueue", qname, "big", "-", "--url", url, input=b"{nope"))
    assert "stdin is not valid JSON" in bad


@pytest.mark.parametrize(
    "args",
    [
        ["archive", "run", "q", "--once"],
        ["archive", "status", "q"],
        ["archive", "restore", "q", "--from", "{tmp}"],
        ["archive", "ship", "q", "--to", "{tmp}"],
        ["history", "q", "JOB0123456789a"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_floor_in_a_missing_directory_is_refused_and_nothing_is_created(
    url: str, tmp_path: Path, args: list[str]
) -> None:
    typo = tmp_path / "typo" / "path" / "floor.sqlite3"
    filled = [a.replace("{tmp}", str(tmp_path)) for a in args]
    server = [] if args[1] in ("restore", "ship") else ["--url", url]  # file-only commands
    line = one_error_line(invoke(*filled, "--floor", str(typo), *server))
    assert "is not an existing directory" in line
    assert not (tmp_path / "typo").exists()


def test_error_lines_and_tables_do_not_wrap_when_not_a_terminal(url: str) -> None:
    line = one_error_line(invoke("job", "q", "JOB-not-an-id-at-all", "--url", url))
    assert len(line) > 80, "the point is a line longer than the default 80 columns"
    name = "q" + "x" * 120
    assert invoke("enqueue", name, "send", "--url", url).exit_code == 0
    out = invoke("stats", name, "--url", url)
    assert out.exit_code == 0, out.output
    for header in ("queue", "pending", "active", "schedule", "dead", "completed", "recovered"):
        assert f" {header} " in out.output, out.output
    assert name in out.output, "the queue name is whole, on one line"


@pytest.fixture
def failed_job(url: str, queue: Queue) -> str:
    """A job whose real handler raised: its ``dead`` event carries a multi-line traceback."""

    def handler(payload: Any) -> None:
        raise ValueError("the disk is full")

    job_id = queue.enqueue("explode", None, max_attempts=1)
    queue.enqueue("other", None)
    w = Worker(queue.name, {"explode": handler, "other": lambda p: None}, url=url,
               options=WorkerOptions(burst=True))  # fmt: skip
    w.run_sync(handle_signals=False)
    row = queue.job(job_id)
    assert row is not None and row.state == "dead", row
    return job_id


def test_events_and_history_print_one_line_per_event(
    url: str, queue: Queue, failed_job: str
) -> None:
    events = list(queue.events("0-0"))
    assert any("\n" in str(v) for e in events for v in e.fields.values()), "a traceback"
    for args in (["events", "tail", queue.name, "-n", "100"], ["history", queue.name, failed_job]):
        out = invoke(*args, "--url", url)
        assert out.exit_code == 0, out.output
        lines = out.output.strip().splitlines()
        mine = [e for e in events if args[0] == "events" or e.job == failed_job]
        assert len(lines) == len(mine), out.output
        assert "ValueError: the disk is full (traceback:" in out.output
        full = invoke(*args, "--traceback", "--url", url)
        assert "Traceback (most recent call last)" in full.output


def test_history_json_is_one_object_per_line(url: str, queue: Queue) -> None:
    job_id = queue.enqueue("report", {"month": 5})
    queue.claim(1)
    out = invoke("history", queue.name, job_id, "--url", url, "--json")
    assert out.exit_code == 0, out.output
    objects = [json.loads(line) for line in out.output.splitlines()]
    assert [type(o) for o in objects] == [dict, dict]
    assert [o["event"] for o in objects] == ["enqueued", "claimed"]


def _leaves(group: click.Group, path: str = "emq") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            out += _leaves(command, f"{path} {name}")
        else:
            out.append((f"{path} {name}", command))
    return out


def test_every_option_has_help_and_every_command_has_json() -> None:
    assert isinstance(cli, click.Group)
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # the lazy group loads a command on first use
        cli.get_command(ctx, name)
    leaves = _leaves(cli)
    assert len(leaves) > 20
    missing = [
        f"{path} {opt.opts[0]}"
        for path, command in leaves
        for opt in command.params
        if isinstance(opt, click.Option) and not opt.help
    ]
    assert missing == []
    no_json = [p for p, c in leaves if not any("--json" in o.opts for o in c.params)]
    # servers (they print no result) and the Prometheus text, already a machine format
    assert no_json == ["emq dashboard", "emq metrics serve", "emq metrics show"]


def test_jobs_accepts_scheduled_and_schedule(url: str, qname: str) -> None:
    made = json.loads(invoke("enqueue", qname, "later", "--delay-ms", "60000", "--url", url,
                             "--json").output)  # fmt: skip
    for where in ("scheduled", "schedule"):
        out = invoke("jobs", qname, where, "--url", url, "--json")
        assert out.exit_code == 0, out.output
        assert [j["id"] for j in json.loads(out.output)["jobs"]] == [made["id"]]
    table = invoke("jobs", qname, "scheduled", "--url", url)
    assert f"{qname} / scheduled" in table.output and made["id"] in table.output


def test_on_a_narrow_terminal_table_cells_fold_and_ids_stay_whole(
    url: str, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from emq.cli import common

    screen = io.StringIO()
    term = Console(file=screen, force_terminal=True, width=50, soft_wrap=True, color_system=None)
    monkeypatch.setattr(common, "console", term)
    made = invoke("enqueue", qname, "a-rather-long-job-name-here", "--url", url, "--json")
    job_id = json.loads(made.output)["id"]
    assert invoke("jobs", qname, "pending", "--url", url).exit_code == 0
    text = screen.getvalue()
    assert job_id in text, text
    assert "…" not in text, "folded, not cut"
    assert max(len(line) for line in text.splitlines()) <= 50
