"""What the published package says about itself: its metadata (project URLs, classifiers,
author, license), a README whose links work from PyPI (absolute, into files that exist
here), help texts that point only at pages of the published docs, and no extra that holds
the suite's own tools."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import click

from emq.cli.main import DOCS_URL, cli

ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
META = PROJECT["project"]
HOME = META["urls"]["Source"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def test_the_metadata_names_home_docs_author_license_and_classifiers() -> None:
    urls = META["urls"]
    assert set(urls) >= {"Homepage", "Documentation", "Source", "Changelog", "Issues"}
    assert all(u.startswith(HOME) for u in urls.values())
    assert urls["Documentation"] == DOCS_URL
    assert META["authors"] and META["license"] == "MIT"
    assert (ROOT / META["license-files"][0]).read_text().startswith("MIT License")
    classifiers = META["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert f"Programming Language :: Python :: {META['requires-python'][2:]}" in classifiers


def test_no_extra_holds_the_suites_tools() -> None:
    extras = META["optional-dependencies"]
    assert "test" not in extras
    tools = {"pytest", "mypy", "ruff", "playwright", "moto"}
    named = {re.split(r"[\[<>=]", d)[0] for ds in extras.values() for d in ds}
    assert not named & tools
    assert tools <= {re.split(r"[\[<>=]", d)[0] for d in PROJECT["dependency-groups"]["test"]}


def test_every_readme_link_is_absolute_and_reaches_a_file_of_the_tree() -> None:
    links = LINK.findall((ROOT / "README.md").read_text())
    assert len(links) > 20
    for target in links:
        assert re.match(r"https?://", target), f"README link {target} is relative: PyPI breaks it"
        if not target.startswith(HOME + "/"):
            continue
        kind, branch, path = target[len(HOME) + 1 :].split("/", 2)
        assert (kind, branch) in {("blob", "main"), ("tree", "main"), ("raw", "main")}, target
        assert (ROOT / path.partition("#")[0]).exists(), f"README links a missing {path}"


def _helps(cmd: click.Command, path: list[str]) -> list[tuple[str, str]]:
    ctx = click.Context(cmd, info_name=" ".join(path))
    out = [(" ".join(path), cmd.get_help(ctx))]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            out += _helps(sub, [*path, name])
    return out


def test_help_texts_point_only_at_published_doc_pages() -> None:
    helps = _helps(cli, ["emq"])
    assert len(helps) > 30 and DOCS_URL in helps[0][1]
    pages = 0
    for command, text in helps:
        flat = " ".join(text.split())
        assert not re.search(r"\b(docs|src|tests)/\S", flat), (command, flat)
        for page in re.findall(r"docs: ([a-z-]+\.md)", flat):
            assert (ROOT / "docs" / page).exists(), (command, page)
            pages += 1
    assert pages >= 8  # NAME.md, the epilog's placeholder, is not a page
