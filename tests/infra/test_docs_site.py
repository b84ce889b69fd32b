"""The documentation site (mkdocs.yml), built as `make docs` builds it: the pages made at build time
are the README and the tutorial modules, unchanged."""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
import subprocess
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import griffe
import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.plugins import BasePlugin

from marin.report.browser import headless_chromium
from testsupport.browser import requested_urls

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


@dataclass(frozen=True)
class _Site:
    folder: Path
    config: Any
    pages: _PageMarkdown


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> _Site:
    """The site, built once for the module as `make docs` builds it (seconds)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site), strict=True)
    pages = _PageMarkdown()
    config.plugins["test-page-markdown"] = pages
    build(config)  # strict: any warning (a broken link, a docstring griffe cannot read) fails it
    return _Site(site, config, pages)


def test_site_builds_with_readme_as_home_and_a_page_per_tutorial(built_site: _Site) -> None:
    site, config, pages = built_site.folder, built_site.config, built_site.pages

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


# -- offline: nothing leaves the machine, search works from file:// --------------------------------

# Where a page, a stylesheet or an inline style would fetch from another machine.
_REMOTE = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
_CSS_TARGET = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.IGNORECASE)
# A <link> with one of these relations names a page, it does not load anything.
_LINK_NOT_LOADED = {"canonical", "alternate", "prev", "next", "author", "license", "search", "help"}


class _RequestTargets(HTMLParser):
    """What a page makes the browser load: scripts, stylesheets, fonts, images, frames, CSS url()s."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "link" and not set(values.get("rel", "").lower().split()) & _LINK_NOT_LOADED:
            self.targets.append(values.get("href", ""))
        self.targets += [values[name] for name in ("src", "data", "poster") if name in values]
        self.targets += [part.split()[0] for part in values.get("srcset", "").split(",") if part.strip()]
        self.targets += _css_targets(values.get("style", ""))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.targets += _css_targets(data)


def _css_targets(css: str) -> list[str]:
    return [url or imported for url, imported in _CSS_TARGET.findall(css)]


def test_no_page_or_stylesheet_loads_anything_from_another_machine(built_site: _Site) -> None:
    remote: set[str] = set()
    pages = sorted(built_site.folder.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        parser = _RequestTargets()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.targets, page  # the parser sees the theme's scripts and stylesheets
        remote |= {f"{page.name}: {target}" for target in parser.targets if _REMOTE.match(target)}
    for stylesheet in built_site.folder.rglob("*.css"):
        remote |= {f"{stylesheet.name}: {target}" for target in _css_targets(stylesheet.read_text(encoding="utf-8"))
                   if _REMOTE.match(target)}
    assert sorted(remote) == []
    # Search's index as a script too, for a page opened from disk (the offline plugin).
    assert (built_site.folder / "search" / "search_index.js").read_text(encoding="utf-8").startswith("var __index")


def test_search_answers_on_the_site_opened_from_disk_and_nothing_is_fetched_from_the_network(
        built_site: _Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By  # selenium: only this test drives a browser

    with headless_chromium(str(tmp_path / "chromium"), log_requests=True) as driver:
        driver.get((built_site.folder / "index.html").as_uri())
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        box.click()
        box.send_keys("curation")
        deadline = time.monotonic() + 20
        while not (links := [a.get_attribute("href") for a in
                             driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]):
            meta = driver.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
            assert time.monotonic() < deadline, f"no search result; the search says {meta!r}"
            time.sleep(0.05)
        assert re.fullmatch(r"\d+ matching documents?",
                            driver.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text)
        assert links[0].startswith("file://") and links[0].endswith("/data-curation.html"), links
        driver.get((built_site.folder / "tutorials" / "hello_world.html").as_uri())
        requested = requested_urls(driver)
    assert any(url.endswith("/search/search_index.js") for url in requested), requested
    # What would leave the machine (the browser's own start page, chrome://, does not).
    assert [url for url in requested if re.match(r"(?:https?|wss?|ftp):", url)] == []


# -- every file a page names is in the repository -------------------------------------------------


def _tracked_top_level() -> tuple[list[str], list[str]]:
    """The repository's top-level folders and files (what git tracks: not build/ or .venv/)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    tops = {line.split("/")[0] for line in listed.splitlines()}
    return sorted(t for t in tops if (ROOT / t).is_dir()), sorted(t for t in tops if (ROOT / t).is_file())


def named_repository_paths(text: str, folders: list[str], files: list[str]) -> list[str]:
    """The repository paths a page's text names: a word that starts with one of the repository's
    top-level folders and a slash (``experiments/tutorials/x.py``, ``docs/``, ``pkgs/*/src``,
    ``pkgs/<name>/``), or is one of its top-level files (``Makefile``), wherever it stands (prose,
    code spans, code blocks, links). A word inside a URL or another path is not one."""
    alternatives = [f"{re.escape(folder)}/[\\w./*<>{{}}-]*" for folder in folders] + [re.escape(f) for f in files]
    pattern = re.compile(rf"(?<![\w./:@~$<-])(?:{'|'.join(alternatives)})(?![\w/-])")
    return [match.rstrip(".") for match in pattern.findall(text)]


def _exists(path: str) -> bool:
    """Whether a named path is there; a ``*`` or ``<placeholder>`` stands for any name."""
    pattern = re.sub(r"<[^>/]*>", "*", path).rstrip("/")
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()


def test_named_repository_paths() -> None:
    folders, files = ["docs", "experiments", "pkgs"], ["Makefile"]
    text = ("Run `marin run experiments/tutorials/hello_world.py`; see docs/nix.md, pkgs/<name>/tests/ and\n"
            "[x](https://github.com/o/r/blob/main/docs/a.md), ./build/docs/x, my-docs/y, Makefile.\n")
    assert named_repository_paths(text, folders, files) == [
        "experiments/tutorials/hello_world.py", "docs/nix.md", "pkgs/<name>/tests/", "Makefile"]
    assert _exists("pkgs/<name>/tests/") and _exists("pkgs/*/src") and not _exists("experiments/tutorial.py")


def test_every_page_names_only_files_that_exist(built_site: _Site) -> None:
    folders, files = _tracked_top_level()
    named = {uri: named_repository_paths(markdown, folders, files) for uri, markdown in built_site.pages.by_uri.items()}
    assert "experiments/tutorials/hello_world.py" in named["tutorials/hello_world.md"]
    missing = sorted(f"{uri}: {path}" for uri, paths in named.items() for path in paths if not _exists(path))
    assert missing == [], "these pages name files the repository does not have"


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
