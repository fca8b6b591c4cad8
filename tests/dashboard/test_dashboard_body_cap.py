"""The dashboard's request body cap (64 KiB) over real HTTP: uvicorn serving the app on a
loopback port, raw sockets for what a browser never sends. A declared ``Content-Length`` over
the cap is answered 413 before one byte of the body is read (the client never sends it); a
chunked body is counted while it streams and answered 413 once it passes the cap; the bytes
the server handed to the app are counted by an ASGI wrapper around the whole app, so the
bound is asserted in bytes, never in time. A form under the cap still logs in."""

from __future__ import annotations

import select
import socket
from typing import Any

import httpx
import pytest

from emq.dashboard.security import MAX_BODY_BYTES

from .test_dashboard import BOUND_S, TOKEN, csrf, serve

pytestmark = pytest.mark.servers("valkey")  # the cap is the dashboard's, not the server's

CHUNK = 64 * 1024
FORM = "application/x-www-form-urlencoded"


class Counting:
    """An ASGI wrapper that counts the request body bytes the server hands to the app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                self.read += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


def _port(c: httpx.Client) -> int:
    return int(c.base_url.port or 0)


def _status(s: socket.socket) -> int:
    """The status code of the response on ``s`` (its first line)."""
    data = b""
    while b"\r\n" not in data:
        got = s.recv(4096)
        assert got, f"the connection closed before a status line: {data!r}"
        data += got
    return int(data.split(b" ", 2)[1])


def _head(port: int, path: str, length: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {FORM}\r\n"
        f"{length}\r\n\r\n"
    ).encode()


def declared(port: int, path: str, length: int) -> int:
    """Send only the head of a POST declaring ``length`` body bytes; its status."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as s:
        s.sendall(_head(port, path, f"Content-Length: {length}"))
        return _status(s)  # never sent a byte of the body: the answer comes before it


def chunked(port: int, path: str, total: int) -> int:
    """POST up to ``total`` body bytes in 64 KiB chunks, stopping once the server answers
    (as a client should); the status of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as s:
        s.sendall(_head(port, path, "Transfer-Encoding: chunked"))
        chunk = b"%x\r\n" % CHUNK + b"a" * CHUNK + b"\r\n"
        sent = 0
        try:
            while sent < total and not select.select([s], [], [], 0)[0]:
                s.sendall(chunk)
                sent += CHUNK
            if sent >= total:
                s.sendall(b"0\r\n\r\n")
        except OSError:  # the server closed the connection after its answer
            pass
        return _status(s)


def test_a_declared_body_over_the_cap_is_413_before_any_byte_is_read(url: str, qname: str) -> None:
    counter: list[Counting] = []

    def wrap(app: Any) -> Counting:
        counter.append(Counting(app))
        return counter[0]

    with serve(url, wrap=wrap, token=TOKEN) as c:
        port = _port(c)
        for path in ("/login", f"/queues/{qname}/pause", "/race/run", "/"):
            assert declared(port, path, 300_000_000) == 413, path
            assert declared(port, path, MAX_BODY_BYTES + 1) == 413, path
        assert counter[0].read == 0


def test_a_chunked_body_over_the_cap_is_413_after_at_most_the_cap_and_one_more_message(
    url: str, qname: str
) -> None:
    """The fault: a 300 MB POST /login was read whole before its 413. Here 50 MB are
    offered per request, on the open login path of a token and on an action. The app reads
    the server's body messages until it is past the cap, so it reads the cap and at most one
    message more; uvicorn's message is what it buffered meanwhile, which its flow control
    holds to its 64 KiB high-water mark plus one 64 KiB socket read (seen: 95,216 bytes on a
    loaded machine): never more than the cap and two chunks, never the body."""
    counter: list[Counting] = []

    def wrap(app: Any) -> Counting:
        counter.append(Counting(app))
        return counter[0]

    for options, path in (({"token": TOKEN}, "/login"), ({}, f"/queues/{qname}/pause")):
        counter.clear()
        with serve(url, wrap=wrap, **options) as c:
            assert chunked(_port(c), path, 50 * 1024 * 1024) == 413, path
            assert counter[0].read <= MAX_BODY_BYTES + 2 * CHUNK, (path, counter[0].read)


def test_a_form_under_the_cap_still_works(url: str) -> None:
    with serve(url, token=TOKEN) as c:
        pad = "x" * (MAX_BODY_BYTES - 1024)
        fields = {"csrf": csrf(c), "token": TOKEN, "next": "/", "pad": pad}
        r = c.post("/login", data=fields, follow_redirects=False)
        assert r.status_code == 303 and "emq_auth" in c.cookies, r.text
        fields["pad"] = "x" * MAX_BODY_BYTES  # the whole form is over the cap now
        assert c.post("/login", data=fields).status_code == 413
        assert c.get("/healthz").text == "ok\n"
