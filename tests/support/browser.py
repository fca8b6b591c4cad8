"""Support for the real-browser tests: the ``emq dashboard`` command as a subprocess, and
headless Chromium driven by Playwright.

Chromium is Debian's package (``apt-get install chromium``: ``/usr/bin/chromium``, or the path
in ``EMQ_CHROMIUM``), launched by Playwright from the test group; ``playwright install`` is never
needed. Without either, the browser tests skip with a message saying how to enable them; with
``EMQ_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail instead.

A :class:`Dashboard` is the real CLI, started with its own options on a free port and stopped
at the end; it is ready once ``/healthz`` answers (waited for with a bound, never a speed).
Screenshots go to ``EMQ_ARTIFACTS`` (a temporary directory by default) and, with
``EMQ_UPDATE_SCREENSHOTS=1``, to ``docs/img/dashboard-<page>.png`` as well.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from emq.embedded.standalone import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("EMQ_CHROMIUM", "/usr/bin/chromium"))
EMQ = Path(sys.executable).parent / "emq"  # the venv's console script
DOCS_IMG = ROOT / "docs" / "img"
DESKTOP = {"width": 1200, "height": 800}
PHONE = {"width": 390, "height": 844}
START_TIMEOUT_S = 60.0  # bounds a hang of the dashboard's start, not its speed
HOW = "install Debian's chromium (`apt-get install chromium`) and the test group (playwright)"


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return f"playwright is not installed: {HOW}"
    if not CHROMIUM.exists():
        return f"no chromium at {CHROMIUM}: {HOW}, or set EMQ_CHROMIUM"
    return None


def require_browser() -> None:
    """Skip (or, with ``EMQ_REQUIRE_BROWSER=1``, fail) when the browser tests cannot run."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("EMQ_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests required (EMQ_REQUIRE_BROWSER=1) but {reason}")
    pytest.skip(f"browser tests skipped: {reason}")


def non_loopback_ipv4() -> str | None:
    """A local IPv4 address that is not loopback (traffic to it stays on this machine), or
    None when the machine has none. The UDP ``connect`` sends nothing; it only picks the
    source address the kernel would use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never sent, only routed
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    if addr.startswith("127.") or addr == "0.0.0.0":
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
        except OSError:
            return None
    return addr


class Dashboard:
    """``emq dashboard --url URL --host HOST --port PORT *args`` as a subprocess."""

    def __init__(
        self,
        redis_url: str,
        log_path: Path,
        *,
        args: Sequence[str] = (),
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = free_port()
        self.base = f"http://{host}:{self.port}"
        self.log_path = log_path
        self.cmd = [str(EMQ), "dashboard", "--url", redis_url, "--host", host]
        self.cmd += ["--port", str(self.port), *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Dashboard:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.log_path.parent
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"emq dashboard exited ({self.proc.returncode}):\n{self.log()}"
                )
            if self.status("/healthz") == 200:
                return self
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"emq dashboard did not answer /healthz in time:\n{self.log()}")

    def status(self, path: str, headers: dict[str, str] | None = None) -> int | None:
        """The HTTP status of a GET (redirects not followed), or None if nothing answers."""
        req = urllib.request.Request(self.base + path, headers=headers or {})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, urllib.error.URLError):
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextlib.contextmanager
def dashboard(redis_url: str, log_path: Path, **kwargs: Any) -> Iterator[Dashboard]:
    d = Dashboard(redis_url, log_path, **kwargs).start()
    try:
        yield d
    finally:
        d.stop()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """One headless Chromium (Debian's) for a module; yields a Playwright ``Browser``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield browser
        finally:
            browser.close()


def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``EMQ_ARTIFACTS`` or a directory pytest keeps for the run."""
    where = os.environ.get("EMQ_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(page: Any, name: str, artifacts: Path, *, full: bool = False) -> Path:
    """Save the viewport (``full``: the whole page, up to twice the viewport's height) as
    ``dashboard-<name>.png`` among the artefacts, and in docs/img when
    ``EMQ_UPDATE_SCREENSHOTS=1``."""
    out = artifacts / f"dashboard-{name}.png"
    if full:
        size = page.viewport_size
        height = min(page.evaluate("document.documentElement.scrollHeight"), 2 * size["height"])
        clip = {"x": 0, "y": 0, "width": size["width"], "height": height}
        page.screenshot(path=str(out), full_page=True, clip=clip)
    else:
        page.screenshot(path=str(out))
    if os.environ.get("EMQ_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        (DOCS_IMG / out.name).write_bytes(out.read_bytes())
    return out
