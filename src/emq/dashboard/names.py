"""Every queue name on the server: :func:`emq.discovery.aqueue_names` when it is present,
else a scan of the ``emq:{<queue>}:`` keys (sorted either way)."""

from __future__ import annotations

import re
from importlib import import_module

import redis.asyncio

_QUEUE_OF_KEY = re.compile(r"^emq:\{([A-Za-z0-9._-]+)\}:")


async def aqueue_names(client: redis.asyncio.Redis) -> list[str]:
    try:
        discovery = import_module("emq.discovery")
    except ImportError:
        discovery = None
    if discovery is not None and hasattr(discovery, "aqueue_names"):
        names: list[str] = await discovery.aqueue_names(client)
        return sorted(names)
    found: set[str] = set()
    async for key in client.scan_iter(match="emq:{*}:*", count=1000):
        if m := _QUEUE_OF_KEY.match(key):
            found.add(m[1])
    return sorted(found)
