"""The docs' Python blocks as Sybil reads them: every ```` ```python ```` block of README.md and
docs/*.md, the invisible blocks a page adds for its stand-ins, and the fragments it marks.

A page's blocks run in order in one namespace (the page's), so a block may use what an
earlier block of the page defined. Top-level ``await`` and ``async for`` run on the page's
own event loop. ``redis://127.0.0.1:6379/0``, the address the docs give a local server, is
the suite's server while the docs run. Two directives in HTML comments, which the rendered
page hides:

- ``<!-- fragment: REASON -->`` right above a block: the block is part of a program the page
  cannot hold (a Django project, a server at another address); it is parsed, never run;
- ``<!-- invisible-code-block: python`` ... ``-->`` (Sybil's own): code that runs in the
  page's namespace at that point, for a stand-in of the reader's code (``smtp_send``).

``tests/docs/test_pages.py`` runs every page; CONTRIBUTING.md says how to write one.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

ROOT = Path(__file__).parents[2]
DOCS_URL = "redis://127.0.0.1:6379/0"  # a local server in the docs: the suite's while they run
PAGE = "__page__"  # the namespace's key of the running page's Page
NOT_PYTHON = {
    "",
    "sh",
    "console",
    "text",
    "json",
    "sql",
    "lua",
    "acl",
    "acl-durable",
    "yaml",
    "mermaid",
}
"""The other languages a fenced block of the docs may name: none of them is run."""


@dataclass
class Page:
    """A page being run: the suite server's URL, its loop, and what became of each block."""

    url: str
    loop: asyncio.Runner
    ran: list[int] = field(default_factory=list)  # the first line of each block run
    fragments: dict[int, str] = field(default_factory=dict)  # line -> reason


class Fragment(Exception):
    """Raised for a block marked ``<!-- fragment: REASON -->``: parsed, not run."""


def _run_block(example: Example) -> None:
    """Run one python block in its page's namespace (compiled with its page's line numbers)."""
    __tracebackhide__ = True
    page: Page = example.namespace[PAGE]
    source = example.parsed.replace(DOCS_URL, page.url)
    padded = "\n" * (example.line + example.parsed.line_offset) + source
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


class _Fragments:
    """``<!-- fragment: REASON -->``: the python block right below is not run."""

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer("fragment", arguments=r".+?")

    def __call__(self, document: Document) -> Iterable[Region]:
        for lexed in self.lexer(document):
            reason = str(lexed.lexemes["arguments"]).strip()
            if not reason:
                raise ValueError(f"{document.path}: a fragment needs its reason")
            yield Region(lexed.start, lexed.end, reason, _mark_fragment)


def _mark_fragment(example: Example) -> None:
    reason: str = example.parsed

    def skip(next_example: Example) -> None:
        example.document.pop_evaluator(skip)
        if next_example.region.evaluator is not _run_block:
            raise ValueError(f"{example.path}:{example.line}: a fragment marks a python block")
        example.namespace[PAGE].fragments[next_example.line] = reason
        raise Fragment(reason)

    example.document.push_evaluator(skip)


SYBIL = Sybil(parsers=[_Python(), _Fragments()], path=str(ROOT))


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
    for example in document.examples():
        try:
            example.evaluate()
        except Fragment:
            continue
    return page
