"""The documentation site (mkdocs.yml), built as `make docs` builds it: the pages made at build time
are the README and the tutorial modules, unchanged."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.plugins import BasePlugin

ROOT = Path(__file__).resolve().parents[1]
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
