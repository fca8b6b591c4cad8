"""When a repeating schedule ticks: pure arithmetic on server-clock milliseconds, no I/O.

One rule type serves both kinds of schedule, so registering and firing have one code path:

- ``every_ms``: ticks at ``anchor + k * every_ms`` for k >= 0, where ``anchor`` is
  ``start_at_ms`` or 0 (the Unix epoch) when none is given, so re-registering the same spec
  anywhere, any time, yields the same ticks.
- ``cron``: the usual five fields (minute hour day-of-month month day-of-week), evaluated in a
  named IANA time zone by `cronsim <https://github.com/cuu508/cronsim>`_ (maintained, built on
  :mod:`zoneinfo`). DST follows Debian cron, as cronsim does: a job at a fixed local time
  (minute and hour fields both not starting with ``*``) that falls into the spring-forward gap
  runs at the first valid minute after it (02:30 on a day that skips 02:00-03:00 runs at
  03:00), and once, at the first occurrence, on the fall-back day; a job with ``*`` in the
  minute or hour field runs at every real instant that matches (the repeated hour of a
  fall-back day matches twice). Ticks are whole seconds (the seconds field is always 0).

:meth:`TickRule.after` is strictly increasing, so a schedule's ticks are a well-defined
sequence; the firing code walks it from a schedule's stored ``next``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import InvalidOption
from .checks import shown

MAX_EVERY_MS = 366 * 86_400_000  # a year and a day
CATCH_UP_ALL_MAX = 1_000  # ticks of one schedule fired per call with catch_up="all"
COUNT_SKIPPED_MAX = 100_000  # cron ticks counted one by one when catching up "latest"


def check_zone(tz: object) -> ZoneInfo:
    """The IANA zone named ``tz`` or :class:`InvalidOption`."""
    if not isinstance(tz, str) or not 0 < len(tz) <= 64:
        raise InvalidOption(f"tz must be an IANA time zone name such as 'UTC', got {shown(tz)}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidOption(
            f"unknown time zone {shown(tz)}: use an IANA name such as 'UTC', 'Europe/Berlin' "
            "or 'America/New_York' (install the tzdata package where the system has no zone "
            "database)"
        ) from None


def check_cron(expr: object, zone: ZoneInfo) -> str:
    """A five-field cron expression that has a next time, or :class:`InvalidOption`."""
    if not isinstance(expr, str) or len(expr) > 256 or len(expr.split()) != 5:
        raise InvalidOption(
            f"cron must be five fields 'minute hour day-of-month month day-of-week', such as "
            f"'*/5 * * * *' or '30 2 * * MON-FRI', got {shown(expr)}"
        )
    text = " ".join(expr.split())
    try:
        next(CronSim(text, datetime(2024, 1, 1, tzinfo=zone)))
    except CronSimError as exc:
        raise InvalidOption(f"cron {shown(expr)} is invalid: {exc}") from None
    except StopIteration:
        raise InvalidOption(f"cron {shown(expr)} never matches a date") from None
    return text


@dataclass(frozen=True, slots=True)
class TickRule:
    """The ticks of one schedule: ``every_ms`` (with ``anchor``) or ``cron`` (in ``tz``).
    Construct with checked values (:mod:`emq.calls.repeats` checks them)."""

    every_ms: int | None = None
    anchor: int = 0
    cron: str | None = None
    tz: str = "UTC"

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)  # ZoneInfo keeps one instance per name

    def after(self, ms: int) -> int:
        """The first tick strictly after ``ms``."""
        return self.at_or_after(ms + 1)

    def at_or_after(self, ms: int) -> int:
        """The first tick at or after ``ms``."""
        if self.every_ms is not None:
            if ms <= self.anchor:
                return self.anchor
            return self.anchor + -(-(ms - self.anchor) // self.every_ms) * self.every_ms
        assert self.cron is not None
        # cronsim starts one second after the (whole) second it is given
        start = datetime.fromtimestamp((ms - 1) // 1000, tz=UTC).astimezone(self._zone)
        for found in CronSim(self.cron, start):
            tick = int(found.timestamp()) * 1000
            if tick >= ms:  # a fixed local time on a fall-back day can map before the start
                return tick
        raise AssertionError("unreachable: CronSim iterates until StopIteration")

    def due(self, next_ms: int, now_ms: int, catch_up: str) -> tuple[list[int], int, int]:
        """What to fire of a schedule whose stored next tick is ``next_ms`` (<= ``now_ms``):
        ``(ticks, following, skipped)``. ``catch_up="all"``: every due tick in order, at most
        :data:`CATCH_UP_ALL_MAX` (the rest are due again at once, for the next call);
        ``"latest"``: only the latest due tick, ``skipped`` = how many due ticks before it
        are not fired. ``following`` is the tick after the last one returned."""
        if catch_up == "all":
            ticks = [next_ms]
            following = self.after(next_ms)
            while following <= now_ms and len(ticks) < CATCH_UP_ALL_MAX:
                ticks.append(following)
                following = self.after(following)
            return ticks, following, 0
        if self.every_ms is not None:
            skipped = (now_ms - next_ms) // self.every_ms
            latest = next_ms + skipped * self.every_ms
            return [latest], latest + self.every_ms, skipped
        latest, skipped = next_ms, 0
        following = self.after(latest)
        while following <= now_ms:
            latest, skipped = following, skipped + 1
            if skipped >= COUNT_SKIPPED_MAX:  # a long downtime: jump to the last due tick
                latest = max(latest, self._last_at_or_before(now_ms))
                following = self.after(latest)
                break
            following = self.after(latest)
        return [latest], following, skipped

    def _last_at_or_before(self, ms: int) -> int:
        start = datetime.fromtimestamp(ms // 1000 + 1, tz=UTC).astimezone(self._zone)
        for found in CronSim(self.cron or "", start, reverse=True):
            tick = int(found.timestamp()) * 1000
            if tick <= ms:
                return tick
        return 0
