"""The docs' Python blocks as Sybil reads them: every ```` ```python ```` block of README.md and
docs/*.md, the invisible blocks a page adds for its stand-ins, and the fragments it marks.

A page's blocks run in order in one namespace (the page's), so a block may use what an
earlier block of the page defined. Top-level ``await`` and ``async for`` run on the page's
own event loop. ``redis://127.0.0.1:6379/0``, the address the docs give a local server, is
the suite's server while the docs run. Three directives in HTML comments, which the
rendered page hides:

- ``<!-- fragment: REASON -->`` right above a block: the block is part of a program the page
  cannot hold (a Django project, a server at another address); it is parsed, never run;
- ``<!-- file: PATH -->`` right above a block: the block is that file of the reader's project
  (``myapp/tasks.py``). It is written under a directory on ``sys.path`` instead of run, so a
  later block runs it by importing it, as the reader's code would; one that no block
  imports fails the page;
- ``<!-- invisible-code-block: python`` ... ``-->`` (Sybil's own): code that runs in the
  page's namespace at that point, for a stand-in of the reader's code (``smtp_send``).

``tests/docs/test_pages.py`` runs every page; CONTRIBUTING.md says how to write one.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

ROOT = Path(__file__).parents[2]
DOCS_URL = "redis://127.0.0.1:6379/0"  # a local server in the docs: the suite's while they run
PAGE = "__page__"  # the namespace's key of the running page's Page
NOT_PYTHON = {"", "sh", "console", "text", "json", "sql", "lua", "acl", "yaml", "mermaid"}
NOT_PYTHON.add("acl-durable")  # docs/security.md: what durability="aof" adds to the roles
"""The other languages a fenced block of the docs may name: none of them is run."""


@dataclass
class Page:
    """A page being run: the suite server's URL, its loop, and what became of each block."""

    url: str
    loop: asyncio.Runner
    files: Path  # where a ``file:`` block is written: on sys.path while the page runs
    ran: list[int] = field(default_factory=list)  # the first line of each block run
    fragments: dict[int, str] = field(default_factory=dict)  # line -> reason
    written: dict[int, str] = field(default_factory=dict)  # line -> module name

    def source(self, example: Example) -> str:
        """The block's code, the docs' local server address the suite's."""
        return str(example.parsed).replace(DOCS_URL, self.url)


class NotRun(Exception):
    """Raised for a block marked a fragment (parsed, not run) or a file (written)."""


def _run_block(example: Example) -> None:
    """Run one python block in its page's namespace (compiled with its page's line numbers)."""
    __tracebackhide__ = True
    page: Page = example.namespace[PAGE]
    padded = "\n" * (example.line + example.parsed.line_offset) + page.source(example)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(padded, example.path, "exec", flags=flags, dont_inherit=True)
    if code.co_flags & inspect.CO_COROUTINE:
        page.loop.run(eval(code, example.namespace))
    else:
        exec(code, example.namespace)
    example.namespace.pop("__builtins__", None)
    page.ran.append(example.line)


class _Python(PythonCodeBlockParser):
    """Sybil's Python code-block parser, its blocks run by :func:`_run_block`."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            region.evaluator = _run_block
            yield region


class _Directive:
    """``<!-- NAME: ARGUMENT -->`` right above a python block: the block is not run in the
    page's namespace; ``then(page, block, argument)`` says what becomes of it."""

    def __init__(self, name: str, then: Callable[[Page, Example, str], None]) -> None:
        self.name, self.then = name, then
        self.lexer = DirectiveInHTMLCommentLexer(name, arguments=r".*?")

    def __call__(self, document: Document) -> Iterable[Region]:
        for lexed in self.lexer(document):
            argument = str(lexed.lexemes["arguments"]).strip()
            if not argument:
                raise ValueError(f"{document.path}: {self.name}: needs its argument")
            yield Region(lexed.start, lexed.end, argument, self._mark)

    def _mark(self, example: Example) -> None:
        def instead(block: Example) -> None:
            example.document.pop_evaluator(instead)
            if block.region.evaluator is not _run_block:
                raise ValueError(f"{example.path}:{example.line}: {self.name}: no python block")
            self.then(block.namespace[PAGE], block, example.parsed)
            raise NotRun(self.name)

        example.document.push_evaluator(instead)


def _fragment(page: Page, block: Example, reason: str) -> None:
    page.fragments[block.line] = reason


def _file(page: Page, block: Example, path: str) -> None:
    target = page.files / path
    if target.suffix != ".py" or ".." in target.parts:
        raise ValueError(f"{block.path}:{block.line}: file: a relative path of a .py file")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page.source(block))
    page.written[block.line] = ".".join(Path(path).with_suffix("").parts)


SYBIL = Sybil(
    parsers=[_Python(), _Directive("fragment", _fragment), _Directive("file", _file)],
    path=str(ROOT),
)


def pages() -> list[str]:
    """The pages with Python blocks, relative to the repository."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [str(p.relative_to(ROOT)) for p in found if any(examples(p))]


def examples(path: Path) -> Iterator[Example]:
    return SYBIL.parse(path).examples()


def python_blocks(path: Path) -> list[str]:
    """The source of each visible python block of ``path``, in order."""
    return [
        str(e.parsed) for e in examples(path) if e.region.evaluator is _run_block and _fenced(e)
    ]


def block_after(path: Path, marker: str) -> str:
    """The source of the first visible python block of ``path`` below ``marker``."""
    at = path.read_text().index(marker)
    found = examples(path)
    return next(str(e.parsed) for e in found if e.start > at and e.region.evaluator is _run_block)


def _fenced(example: Example) -> bool:
    """True for a fenced block the reader sees (not an invisible one)."""
    return example.document.text[example.start : example.end].lstrip().startswith("```")


def languages(path: Path) -> set[str]:
    """The language named by each fenced block of ``path``."""
    document = Document(path.read_text(), str(path))
    lexer = FencedCodeBlockLexer(language=r"[^\n]*")
    return {str(region.lexemes["language"]).strip() for region in lexer(document)}


def run_page(path: Path, namespace: dict[str, Any], page: Page) -> Page:
    """Run every block of ``path`` in order in ``namespace`` (which then holds what the page
    defined, for the caller to close); a failing block raises with its line in the page."""
    document = SYBIL.parse(path)
    document.namespace = namespace
    namespace[PAGE] = page
    sys.path.insert(0, str(page.files))
    try:
        blocks = []
        for example in document.examples():
            if example.region.evaluator is _run_block:
                blocks.append(example.line)
            try:
                example.evaluate()
            except NotRun:
                continue
        done = [*page.ran, *page.fragments, *page.written]
        assert sorted(done) == blocks, f"{path}: blocks {blocks}, ran or marked {sorted(done)}"
        unused = {n for n in page.written.values() if n not in sys.modules}
        assert not unused, f"{path}: no block imports the file blocks {sorted(unused)}"
    finally:
        sys.path.remove(str(page.files))
        for name, module in list(sys.modules.items()):  # the next page writes its own
            if _within(module, page.files):
                del sys.modules[name]
    return page


def _within(module: object, root: Path) -> bool:
    """True for a module (or a namespace package) loaded from under ``root``."""
    places = [getattr(module, "__file__", None), *getattr(module, "__path__", [])]
    return any(str(p).startswith(str(root)) for p in places if p)
