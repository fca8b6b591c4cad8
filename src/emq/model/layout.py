"""The keyspace layout of a queue (docs/keyspace.md, Layout versions).

A queue's ``meta`` hash names the layout its keys are written in, in its field ``layout``;
absent means layout 1, the layout of every emq so far. This emq reads and writes layout
:data:`LAYOUT` only: every script refuses a queue in another one (``includes/layout.lua``)
before it writes anything, and so do the reads of ``Queue`` (counts, a job, a listing), in the
same MULTI as what they read. A newer emq that changes the layout writes the field when it
makes or upgrades a queue, so an emq of today refuses that queue with one line
(:class:`emq.errors.LayoutTooNew`) instead of misreading or corrupting it.
"""

from __future__ import annotations

from ..errors import layout_too_new

LAYOUT = 1  # = LAYOUT in lua/includes/layout.lua (tests/lua/test_layout_refusal.py)
FIELD = "layout"


def check_layout(stored: object, prefix: str) -> None:
    """Raise :class:`~emq.errors.LayoutTooNew` if ``stored`` (meta's ``layout`` field, None
    when absent) names a layout other than this emq's."""
    if stored is not None and stored != str(LAYOUT):
        raise layout_too_new(f"{prefix} {stored!s} {LAYOUT}")
