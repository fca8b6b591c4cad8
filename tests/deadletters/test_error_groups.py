"""Dead letters grouped by a normalised error: numbers, ids (emq job ids, UUIDs), emails and
hex strings are made placeholders, so errors that differ only in those merge into one group
that shows one example of the original text. ``emq dead-letters``, the shells' ``groups``
(``emq.queue._sync.deadletters``) and the dashboard share :func:`error_key`, and a group's
key, as listed, filters that group's jobs (docs/dashboard.md, Dead letters in bulk)."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from emq import Queue
from emq.calls.deadletters import (
    ERROR_KEY_CHARS,
    NO_ERROR,
    DeadFilter,
    Grouper,
    error_key,
    first_line,
    normalise,
)
from emq.cli.main import cli
from emq.queue._sync import deadletters as dl

from ..support.helpers import assert_consistent, make_dead

SAMPLES = {
    "user 17 not found": "user <n> not found",
    "timeout after 30 s (attempt 2)": "timeout after <n> s (attempt <n>)",
    "SMTP 550 5.1.1 mailbox unavailable": "SMTP <n> <n> mailbox unavailable",
    "no inbox for ada.lovelace+test@mail.example.com": "no inbox for <email>",
    "parent JOB0AbCdEfGhIj is gone": "parent <id> is gone",
    "order 123e4567-e89b-12d3-a456-426614174000 locked": "order <id> locked",
    "bad digest a3f9c2d1e8b7 at 0x7ffd1c": "bad digest <hex> at <hex>",
    "connect 10.0.0.5:6379 refused, 1,000 retries": "connect <n>:<n> refused, <n> retries",
    "template welcome-v2: utf8 s3 failed in 30s": "template welcome-v2: utf8 s3 failed in <n>s",
    "deadbeef is a word": "deadbeef is a word",  # hex letters alone: not a hex string
    "12345678 rows": "<n> rows",  # digits alone: a number, not a hex string
}


# --- the pure function ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "key"), SAMPLES.items())
def test_varying_parts_become_placeholders(text: str, key: str) -> None:
    assert error_key(text) == key
    assert error_key(key) == key  # a key is its own key
    assert normalise(normalise(text)) == normalise(text)


def test_errors_that_differ_in_ids_and_emails_share_a_key() -> None:
    keys = {
        error_key(f"user {n} <{e}> job {j} not found\n  at line {n + 3}")
        for n, e, j in [(7, "ada@example.com", "JOB0AbCdEfGhIj"), (81, "k@x.org", "JOB1zzzzzzzzzz")]
    }
    assert keys == {"user <n> <<email>> job <id> not found"}


def test_the_first_line_is_normalised_before_the_cut() -> None:
    long = "id " + "1234567890 " * 40
    key = error_key(long)
    assert key == "id" + " <n>" * 40  # 163 characters: nothing cut
    assert error_key(key) == key
    assert first_line(long) == long.strip()[: ERROR_KEY_CHARS - 1] + "…"
    assert error_key(None) == first_line("  \n ") == NO_ERROR


def test_a_group_counts_every_variant_and_shows_the_newest_as_it_was() -> None:
    g = Grouper()
    g.add("JOB0000000000a", 1_000, "mail", "no inbox for ada@example.com\n  at send()")
    g.add("JOB0000000000b", 3_000, "mail", "no inbox for grace@example.com")
    g.add("JOB0000000000c", 2_000, "sms", "no inbox for linus@example.com")
    g.add("JOB0000000000d", 2_500, "mail", "disk full")
    inbox, disk = g.groups()
    assert (inbox.error, inbox.count, inbox.newest_id) == (
        "no inbox for <email>",
        3,
        "JOB0000000000b",
    )
    assert inbox.example == "no inbox for grace@example.com"
    assert (inbox.oldest_ms, inbox.newest_ms) == (1_000, 3_000)
    assert dict(inbox.names) == {"mail": 2, "sms": 1}
    assert (disk.error, disk.example) == ("disk full", "disk full")
    assert inbox.as_dict()["example"] == "no inbox for grace@example.com"


def test_a_filter_takes_a_group_by_its_key_or_by_any_text_of_it() -> None:
    by_key = DeadFilter(error="user <n> not found")
    by_text = DeadFilter(error="user 99 not found")
    assert by_key == by_text and by_text.error == "user <n> not found"
    for f in (by_key, by_text):
        assert f.matches("x", "user 5 not found\ntrace")
        assert not f.matches("x", "user 5 was found")
    assert "user <n> not found" in by_text.describe()


# --- on the servers: the shells, the CLI and a bulk move agree ----------------------------------


@pytest.mark.servers("valkey", "redis")
def test_the_cli_and_the_shells_list_the_same_merged_groups(
    queue: Queue, url: str, client: redis.Redis
) -> None:
    for n, who in enumerate(["ada", "grace", "linus"]):
        make_dead(queue, [("mail", {"n": n})], f"no inbox for {who}@example.com (code {550 + n})")
    make_dead(queue, [("user", {"n": n}) for n in range(2)], "user 4711 not found")
    shells = [g.as_dict() for g in dl.groups(queue)]
    assert [(g["error"], g["count"]) for g in shells] == [
        ("no inbox for <email> (code <n>)", 3),
        ("user <n> not found", 2),
    ]
    assert shells[0]["example"] in {f"no inbox for {w}@example.com (code {550 + n})"
                                    for n, w in enumerate(["ada", "grace", "linus"])}  # fmt: skip
    run = CliRunner().invoke
    out = run(cli, ["dead-letters", queue.name, "--url", url, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["groups"] == shells
    text = run(cli, ["dead-letters", queue.name, "--url", url])
    assert text.exit_code == 0 and "no inbox for <email>" in text.output
    assert "5 dead job(s) in 2 group(s)" in text.output

    # one member's own text takes its whole group, as the listed key does
    member = "no inbox for someone@else.org (code 1)"
    args = ["dead-letters", queue.name, "redrive", "--error", member, "--url", url, "--json"]
    moved = run(cli, args)
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output)["moved"] == 3
    assert [(g.error, g.count) for g in dl.groups(queue)] == [("user <n> not found", 2)]
    assert dl.purge(queue, DeadFilter(error="user <n> not found")).moved == 2
    assert queue.counts()["dead"] == 0 and queue.counts()["pending"] == 3
    assert_consistent(client, queue.name)
