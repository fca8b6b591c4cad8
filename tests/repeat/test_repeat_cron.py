"""The next-tick computation of repeating schedules, clock-free: every value is a fixed instant,
nothing reads a clock or a server. Cron in named zones across both DST changes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from emq.errors import InvalidOption
from emq.model.repeat_ticks import CATCH_UP_ALL_MAX, TickRule, check_cron, check_zone


def ms(text: str, tz: str = "UTC") -> int:
    """``2026-03-29 01:59`` in zone ``tz`` (the first of an ambiguous pair) as Unix ms."""
    local = datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz))
    return int(local.timestamp() * 1000)


def local(tick: int, tz: str) -> str:
    """A tick as local wall time with its UTC offset, e.g. ``2026-03-29 03:00 +02:00``."""
    at = datetime.fromtimestamp(tick / 1000, tz=UTC).astimezone(ZoneInfo(tz))
    return at.strftime("%Y-%m-%d %H:%M %z")[:-2] + ":" + at.strftime("%z")[-2:]


def ticks(rule: TickRule, start: int, n: int) -> list[int]:
    out = [rule.at_or_after(start)]
    while len(out) < n:
        out.append(rule.after(out[-1]))
    return out


def test_every_minute_in_utc() -> None:
    rule = TickRule(cron="*/1 * * * *")
    got = ticks(rule, ms("2026-05-01 10:00:30"), 3)
    assert [local(t, "UTC") for t in got] == [
        "2026-05-01 10:01 +00:00",
        "2026-05-01 10:02 +00:00",
        "2026-05-01 10:03 +00:00",
    ]
    assert rule.at_or_after(ms("2026-05-01 10:01")) == ms("2026-05-01 10:01")  # at: inclusive
    assert rule.after(ms("2026-05-01 10:01")) == ms("2026-05-01 10:02")  # after: strict


def test_every_five_minutes_and_weekdays() -> None:
    rule = TickRule(cron="*/5 9-17 * * MON-FRI")
    friday_evening = ms("2026-05-01 17:56")  # a Friday
    assert local(rule.at_or_after(friday_evening), "UTC") == "2026-05-04 09:00 +00:00"


SPRING_AUTUMN = {
    "Europe/Berlin": ("2026-03-29", "2026-10-25", "02", "+01:00", "+02:00"),
    "America/New_York": ("2026-03-08", "2026-11-01", "01", "-05:00", "-04:00"),
}


@pytest.mark.parametrize("tz", sorted(SPRING_AUTUMN))
def test_every_fifteen_minutes_is_every_real_instant_across_both_changes(tz: str) -> None:
    """A wildcard schedule fires at every real quarter hour: none in the skipped hour, both
    passes through the repeated hour, always 15 real minutes apart."""
    spring_day, autumn_day, repeated, winter, summer = SPRING_AUTUMN[tz]
    rule = TickRule(cron="*/15 * * * *", tz=tz)
    for day in (spring_day, autumn_day):
        got = ticks(rule, ms(f"{day} 00:00", tz), 16)
        assert all(b - a == 15 * 60_000 for a, b in itertools.pairwise(got)), got
    spring = [local(t, tz)[11:] for t in ticks(rule, ms(f"{spring_day} 01:30", tz), 4)]
    assert spring == [f"01:30 {winter}", f"01:45 {winter}", f"03:00 {summer}", f"03:15 {summer}"]
    autumn = [local(t, tz)[11:] for t in ticks(rule, ms(f"{autumn_day} {repeated}:00", tz), 8)]
    assert autumn == [f"{repeated}:{m} {summer}" for m in ("00", "15", "30", "45")] + [
        f"{repeated}:{m} {winter}" for m in ("00", "15", "30", "45")
    ]


def test_berlin_spring_forward_daily_0230_runs_at_0300() -> None:
    """2026-03-29 Europe/Berlin skips 02:00-03:00: a daily 02:30 job runs once, at 03:00
    (Debian cron's rule, as cronsim keeps it), and at 02:30 the days around it."""
    tz = "Europe/Berlin"
    rule = TickRule(cron="30 2 * * *", tz=tz)
    got = [local(t, tz) for t in ticks(rule, ms("2026-03-28 00:00", tz), 3)]
    assert got == ["2026-03-28 02:30 +01:00", "2026-03-29 03:00 +02:00", "2026-03-30 02:30 +02:00"]


def test_berlin_fall_back_daily_0230_runs_once() -> None:
    """2026-10-25 Europe/Berlin repeats 02:00-03:00: a daily 02:30 job runs once (the first
    pass), and the next tick computed from inside the second pass is the next day's."""
    tz = "Europe/Berlin"
    rule = TickRule(cron="30 2 * * *", tz=tz)
    got = ticks(rule, ms("2026-10-24 12:00", tz), 3)
    assert [local(t, tz) for t in got] == [
        "2026-10-25 02:30 +02:00",
        "2026-10-26 02:30 +01:00",
        "2026-10-27 02:30 +01:00",
    ]
    second_pass = got[0] + 3_600_000 - 60_000  # 02:29 +01:00, after the tick in real time
    assert rule.after(second_pass) == got[1]
    assert got[1] - got[0] == 25 * 3_600_000  # the day was 25 hours long


def test_new_york_daily_fixed_times_on_both_change_days() -> None:
    tz = "America/New_York"
    rule = TickRule(cron="30 2 * * *", tz=tz)
    spring = [local(t, tz) for t in ticks(rule, ms("2026-03-07 12:00", tz), 2)]
    assert spring == ["2026-03-08 03:00 -04:00", "2026-03-09 02:30 -04:00"]
    once = TickRule(cron="30 1 * * *", tz=tz)  # 01:30 happens twice on 2026-11-01: fires once
    autumn = [local(t, tz) for t in ticks(once, ms("2026-10-31 12:00", tz), 2)]
    assert autumn == ["2026-11-01 01:30 -04:00", "2026-11-02 01:30 -05:00"]


def test_hourly_fixed_minute_across_fall_back_fires_every_real_hour() -> None:
    tz = "Europe/Berlin"
    rule = TickRule(cron="0 * * * *", tz=tz)
    got = ticks(rule, ms("2026-10-25 00:30", tz), 5)
    assert all(b - a == 3_600_000 for a, b in itertools.pairwise(got))
    assert [local(t, tz)[11:] for t in got] == [
        "01:00 +02:00", "02:00 +02:00", "02:00 +01:00", "03:00 +01:00", "04:00 +01:00",
    ]  # fmt: skip


def test_every_ms_is_anchored_so_registration_is_deterministic() -> None:
    rule = TickRule(every_ms=200)
    assert rule.at_or_after(1_000_050) == 1_000_200
    assert rule.at_or_after(1_000_200) == 1_000_200
    assert rule.after(1_000_200) == 1_000_400
    anchored = TickRule(every_ms=1000, anchor=1_000_123)
    assert anchored.at_or_after(5) == 1_000_123  # before its start: the start
    assert anchored.at_or_after(1_002_000) == 1_002_123


def test_due_latest_and_all() -> None:
    rule = TickRule(every_ms=100)
    assert rule.due(1_000, 1_450, "latest") == ([1_400], 1_500, 4)
    assert rule.due(1_000, 1_000, "latest") == ([1_000], 1_100, 0)
    assert rule.due(1_000, 1_250, "all") == ([1_000, 1_100, 1_200], 1_300, 0)
    ticks_, following, _ = rule.due(0, 10**9, "all")
    assert len(ticks_) == CATCH_UP_ALL_MAX and following == CATCH_UP_ALL_MAX * 100
    cron = TickRule(cron="*/1 * * * *")
    start = ms("2026-05-01 10:00")
    assert cron.due(start, start + 5 * 60_000 + 10, "latest") == (
        [start + 5 * 60_000],
        start + 6 * 60_000,
        5,
    )


@pytest.mark.slow  # seconds: walks a long downtime's ticks
def test_due_latest_after_a_long_cron_downtime_jumps_to_the_last_due_tick() -> None:
    cron = TickRule(cron="* * * * *")
    start = ms("2025-01-01 00:00")
    now = start + 200 * 86_400_000 + 30_000  # 200 days later, 30 s past a minute
    (latest,), following, skipped = cron.due(start, now, "latest")
    assert latest == now - 30_000 and following == latest + 60_000 and skipped >= 100_000


@pytest.mark.parametrize(
    "expr",
    ["* * * *", "* * * * * *", "61 * * * *", "* 25 * * *", "0 0 30 2 *", "@daily", "x y z a b",
     "", 5],
)  # fmt: skip
def test_invalid_cron_is_refused(expr: object) -> None:
    with pytest.raises(InvalidOption, match="cron"):
        check_cron(expr, ZoneInfo("UTC"))


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "../etc/passwd", "UTC+3", None])
def test_unknown_zone_is_refused(tz: object) -> None:
    with pytest.raises(InvalidOption, match=r"time zone|tz must"):
        check_zone(tz)
