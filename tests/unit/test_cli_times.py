"""The one format of times on the command line (emq.cli.times): pure, no server."""

from __future__ import annotations

import pytest

from emq.cli.times import iso, relative, span, when

NOW = 1_738_325_000_000  # 2025-01-31T12:03:20Z


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0ms"),
        (850, "850ms"),
        (-850, "850ms"),
        (1_000, "1s"),
        (59_999, "59s"),
        (60_000, "1m 00s"),
        (250_000, "4m 10s"),
        (3_599_000, "59m 59s"),
        (3_600_000, "1h 00m"),
        (7_380_000, "2h 03m"),
        (47 * 3_600_000 + 59 * 60_000, "47h 59m"),
        (48 * 3_600_000, "2d 00h"),
        (76 * 3_600_000, "3d 04h"),
    ],
)
def test_span_is_its_two_largest_units(ms: int, text: str) -> None:
    assert span(ms) == text


def test_iso_is_utc_to_the_second() -> None:
    assert iso(NOW) == "2025-01-31T12:03:20Z"
    assert iso(NOW + 999) == "2025-01-31T12:03:20Z"
    assert iso(0) == "1970-01-01T00:00:00Z"


def test_relative_and_when_say_how_soon_or_how_long_ago() -> None:
    assert relative(NOW + 250_000, NOW) == "in 4m 10s"
    assert relative(NOW - 125_000, NOW) == "2m 05s ago"
    assert relative(NOW + 999, NOW) == relative(NOW - 999, NOW) == "now"
    assert when(NOW + 250_000, NOW) == "in 4m 10s (2025-01-31T12:07:30Z)"
    assert when(NOW - 125_000, NOW) == "2m 05s ago (2025-01-31T12:01:15Z)"
    assert when(None, NOW) == ""
