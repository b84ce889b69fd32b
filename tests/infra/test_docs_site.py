"""The documentation site (mkdocs.yml), built as `make docs` builds it: the pages made at build time
are the README and the tutorial modules, unchanged."""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
from pathlib import Path
from typing import Any

import griffe
import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.plugins import BasePlugin

ROOT = Path(__file__).resolve().parents[2]
# An inline Markdown link's target.
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


class _PageMarkdown(BasePlugin):
    """Keeps the Markdown of every page as the build reads it (after the hooks made it)."""

    def __init__(self) -> None:
        self.by_uri: dict[str, str] = {}

    def on_page_markdown(self, markdown: str, /, *, page: Any, config: Any, files: Any) -> str:
        self.by_uri[page.file.src_uri] = markdown
        return markdown


def test_site_builds_with_readme_as_home_and_a_page_per_tutorial(tmp_path: Path) -> None:
    site = tmp_path / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site), strict=True)
    pages = _PageMarkdown()
    config.plugins["test-page-markdown"] = pages
    build(config)  # strict: any warning (a broken link, a docstring griffe cannot read) fails it

    # The home page is README.md's text; only its links to files under docs/ are made relative to docs/.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    home = pages.by_uri["index.md"]
    assert LINK_TARGET.sub("]()", home) == LINK_TARGET.sub("]()", readme)
    assert "](docs/" not in home
    for target in LINK_TARGET.findall(home):
        if not re.match(r"[a-z][\w+.-]*:|#", target):
            assert (site / Path(target.split("#")[0]).with_suffix(".html")).is_file(), target
    assert (site / "index.html").is_file()

    # The README is the front door: it links to every guide, so a page added to the nav is not
    # reachable only from the site's sidebar (and not at all from GitHub).
    guides = next(item["Guides"] for item in config.nav if isinstance(item, dict) and "Guides" in item)
    linked = set(LINK_TARGET.findall(readme))
    assert [page for page in guides if f"docs/{page}" not in linked] == [], "link these guides from README.md"

    # One page per tutorial module: the docstring's first line as title, then the rest of the module verbatim.
    tutorials = sorted(p for p in (ROOT / "experiments" / "tutorials").glob("*.py") if p.name != "__init__.py")
    assert tutorials
    assert sorted(uri for uri in pages.by_uri if uri.startswith("tutorials/")) == \
        [f"tutorials/{p.stem}.md" for p in tutorials]
    for source in tutorials:
        code = source.read_text(encoding="utf-8")
        module = ast.parse(code)
        docstring = ast.get_docstring(module)
        assert docstring, source
        page = pages.by_uri[f"tutorials/{source.stem}.md"]
        assert page.startswith(f"# {docstring.splitlines()[0]}\n"), source
        after_docstring = "".join(code.splitlines(keepends=True)[module.body[0].end_lineno:]).strip()
        assert after_docstring and after_docstring in page, source
        html = (site / "tutorials" / f"{source.stem}.html").read_text(encoding="utf-8")
        assert f"experiments/tutorials/{source.name}" in html

    # Every package has its API page, built from the docstrings.
    for package in ("rigging", "fray", "iris", "zephyr", "levanter", "marin"):
        html = (site / "api" / f"{package}.html").read_text(encoding="utf-8")
        assert f'id="{package}"' in html, package


def _load_docs_module(name: str) -> Any:
    """A module of docs/ (the site's build code, not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstring_roles_become_cross_references_and_stale_ones_are_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    griffe_ext = _load_docs_module("griffe_ext")
    package = tmp_path / "docpkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""See :func:`helper`, :class:`~docpkg.mod.Here`, :mod:`json`, :func:`gone` and :func:`docpkg.mod.gone`.\n\n'
        'Layout::\n\n    a/b\n"""\n\nfrom docpkg.mod import Here\n\n__all__ = ["Here", "helper"]\n\n\n'
        'def helper() -> None:\n    """Help."""\n')
    (package / "mod.py").write_text('"""Mod."""\n\n\nclass Here:\n    """Here; see :meth:`go`."""\n\n'
                                    '    def go(self) -> None:\n        """Go."""\n')
    loader = griffe.GriffeLoader(search_paths=[str(tmp_path)],
                                 extensions=griffe.load_extensions(griffe_ext.ApiReference()))
    with caplog.at_level(logging.WARNING):
        module = loader.load("docpkg")

    def ref(identifier: str, shown: str) -> str:
        return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'

    assert module.docstring.value == (
        f"See {ref('docpkg.helper', 'helper')}, {ref('docpkg.mod.Here', 'Here')}, {ref('json', 'json')}, "
        "`gone` and `docpkg.mod.gone`.\n\nLayout:\n\n    a/b")
    assert module["mod.Here"].docstring.value == f"Here; see {ref('docpkg.mod.Here.go', 'go')}."
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "`gone`, which names nothing in its scope" in warnings[0] \
        and "`docpkg.mod.gone`, which names nothing" in warnings[1], warnings
    # The re-export is documented where it is defined (docpkg.mod), not again in docpkg.
    assert module.members["Here"].public is False and module.members["helper"].is_public


def test_literal_block_markers_read_as_markdown() -> None:
    griffe_ext = _load_docs_module("griffe_ext")
    assert griffe_ext.literal_blocks_as_markdown("Layout::\n\n    a\n") == "Layout:\n\n    a\n"
    assert griffe_ext.literal_blocks_as_markdown("Layout ::\n::\nkeep a::b and x: y") == \
        "Layout\n\nkeep a::b and x: y"


# Public modules the API reference leaves out, each for a reason: the command line's verbs (the
# page docs/cli.md describes the ``marin`` command), and modules that only re-export names under the
# paths Marin's own files import, or under marin.experiment's earlier flat names (each name is
# documented where it is defined).
NOT_ON_REFERENCE_PAGES = {
    "marin",
    "marin.cli",
    "iris.cluster",
    "iris.marin_fs",
    "levanter.compat",
    "levanter.models",
    "marin.execution.artifact",
    "marin.execution.artifact_step",
    "marin.execution.executor",
    "marin.execution.lazy",
    "marin.execution.step",
    "marin.execution.step_runner",
    # marin.experiment's old flat names: each is the same module as its subpackage's, under its old name.
    *(f"marin.experiment.{name}" for name in (
        "chat_data", "chat_template", "chat_tokenize", "corpus", "eval", "eval_results", "eval_table", "hf_hub",
        "scaling_fit", "sources", "story_chat", "story_task", "sweep", "sweep_space", "sweep_steps", "task_eval",
        "tokenize_impl", "tokenizer_train", "train", "warm_start")),
}


def _public_modules() -> list[str]:
    """Every module of the six libraries whose dotted name has no part starting with ``_``."""
    names = []
    for path in sorted((ROOT / "pkgs").glob("*/src/**/*.py")):
        package = path.relative_to(ROOT / "pkgs").parts[0]
        parts = list(path.relative_to(ROOT / "pkgs" / package / "src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            names.append(".".join(parts))
    return names


def test_every_public_module_is_on_a_reference_page() -> None:
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: (\S+)", page.read_text(), re.MULTILINE))
    modules = _public_modules()
    assert "marin.execution.plan.expansion" in modules and "levanter.training.loop" in modules
    undocumented = [
        name
        for name in modules
        if name not in documented
        and name not in NOT_ON_REFERENCE_PAGES
        and not name.startswith("marin.cli.")
    ]
    assert undocumented == [], "add these modules to a page under docs/api/"
    assert sorted(documented - set(modules)) == [], "these reference-page entries name no module"
