"""The keyspace layout of a queue (docs/keyspace.md, Layout versions).

A queue's ``meta`` hash names the layout its keys are written in, in its field ``layout``;
absent means layout 1. This emq reads and writes layouts 1 to :data:`LAYOUT` (2: a call's
events appended as one stream entry; 3: a waiting job of the common case packed, without a
row, in ``packed`` and ``ready``); ``emq upgrade`` moves a queue to 3 in one step
(:mod:`emq.calls.upgrade`). Every script refuses a queue in a newer layout
(``includes/layout.lua``) before it writes anything, and so do the reads of ``Queue`` (counts,
a job, a listing), in the same MULTI as what they read, so a queue of a newer emq is refused
with one line (:class:`emq.errors.LayoutTooNew`) instead of misread or corrupted.
"""

from __future__ import annotations

from ..errors import layout_too_new

LAYOUT = 3  # = LAYOUT in lua/includes/layout.lua (tests/lua/test_layout_refusal.py)
FIELD = "layout"


def check_layout(stored: object, prefix: str) -> None:
    """Raise :class:`~emq.errors.LayoutTooNew` if ``stored`` (meta's ``layout`` field, None
    when absent) names a layout newer than this emq's (or is no layout number at all)."""
    if stored is None:
        return
    text = stored.decode() if isinstance(stored, bytes) else str(stored)
    if not text.isdigit() or int(text) > LAYOUT:
        raise layout_too_new(f"{prefix} {text} {LAYOUT}")


def layout_of(stored: object) -> int:
    """The layout meta's ``layout`` field names (None: 1), after :func:`check_layout`."""
    if stored is None:
        return 1
    return int(stored.decode() if isinstance(stored, bytes) else str(stored))
