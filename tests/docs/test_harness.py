"""The docs harness itself (tests/support/docs.py), on pages written here: blocks run in order
in one namespace, top-level ``await`` runs, the docs' server address is the suite's, a
fragment is not run and must say why and sit on a python block, a file block is written and
must be imported, and a failing block names its line in the page. No server: no block here
connects to one."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.docs import DOCS_URL, Page, python_blocks, run_page

FENCE = "```"


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    runner = asyncio.Runner()
    yield Page(url="redis://127.0.0.1:1/0", loop=runner, files=tmp_path / "files")
    runner.close()


def _write(tmp_path: Path, *parts: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text("# A page\n\n" + "\n\n".join(parts) + "\n")
    return path


def _block(code: str, language: str = "python") -> str:
    return f"{FENCE}{language}\n{code}\n{FENCE}"


def test_blocks_share_the_page_namespace_and_may_await(tmp_path: Path, page: Page) -> None:
    path = _write(
        tmp_path,
        _block("import asyncio\nseen = [url]"),
        "<!-- invisible-code-block: python\nseen.append('hidden')\n-->",
        _block(f"await asyncio.sleep(0)\nseen.append({DOCS_URL!r})"),
    )
    names: dict[str, Any] = {"url": page.url}
    run_page(path, names, page)
    assert names["seen"] == [page.url, "hidden", page.url]  # the docs' address is the suite's
    assert len(page.ran) == 3 and len(python_blocks(path)) == 2  # the invisible one is unseen


def test_a_fragment_is_not_run_and_says_why(tmp_path: Path, page: Page) -> None:
    path = _write(
        tmp_path,
        "<!-- fragment: needs a Django project -->",
        _block("raise AssertionError('ran')"),
        _block("after = True"),
    )
    names: dict[str, Any] = {}
    run_page(path, names, page)
    assert list(page.fragments.values()) == ["needs a Django project"] and names["after"]


def test_a_fragment_without_a_reason_is_refused(tmp_path: Path, page: Page) -> None:
    path = _write(tmp_path, "<!-- fragment: -->", _block("x = 1"))
    with pytest.raises(ValueError, match="needs its argument"):
        run_page(path, {}, page)


def test_a_fragment_marks_a_python_block(tmp_path: Path, page: Page) -> None:
    path = _write(tmp_path, "<!-- fragment: a shell line -->", "<!-- file: x.py -->", _block(""))
    with pytest.raises(ValueError, match="fragment: no python block"):
        run_page(path, {}, page)


def test_a_file_block_is_written_and_run_by_its_import(tmp_path: Path, page: Page) -> None:
    path = _write(
        tmp_path,
        "<!-- file: myapp/config.py -->",
        _block(f"URL = {DOCS_URL!r}"),
        _block("from myapp.config import URL"),
    )
    names: dict[str, Any] = {}
    run_page(path, names, page)
    assert names["URL"] == page.url and (page.files / "myapp" / "config.py").exists()
    assert "myapp.config" not in sys.modules and "myapp" not in sys.modules  # gone with the page


def test_a_file_block_no_block_imports_fails_the_page(tmp_path: Path, page: Page) -> None:
    path = _write(tmp_path, "<!-- file: lonely.py -->", _block("X = 1"))
    with pytest.raises(AssertionError, match="no block imports the file blocks"):
        run_page(path, {}, page)


def test_a_failing_block_names_its_line_in_the_page(tmp_path: Path, page: Page) -> None:
    path = _write(tmp_path, _block("a = 1\nb = missing"))
    with pytest.raises(NameError) as raised:
        run_page(path, {}, page)
    last = raised.traceback[-1]
    assert (Path(last.path), last.lineno + 1) == (path, 5)  # the page's own line of `b = ...`
