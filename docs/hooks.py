"""MkDocs hooks: pages made at build time from the files that are their one source.

- ``index.md`` is README.md, with its links to files under ``docs/`` made relative to the site's
  root (``docs/nix.md`` -> ``nix.md``) and links to tutorials pointed at their pages.
- ``tutorials/<name>.md`` for every ``experiments/tutorials/<name>.py``: its module docstring's
  first line as the title, the rest as the text, then the module's code. The "Tutorials" section
  of mkdocs.yml's nav lists them.

Nothing is written under ``docs/``, so neither can drift from what it shows.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from griffe_ext import literal_blocks_as_markdown
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

README = "README.md"
TUTORIALS = Path("experiments/tutorials")
TUTORIALS_SECTION = "Tutorials"

# An inline link's target that is relative to the README (no scheme, not an anchor or absolute path).
_RELATIVE_LINK = re.compile(r"(?<=\]\()(?![a-z][\w+.-]*:|#|/)([^)\s]+)(?=\))")


def _root(config: MkDocsConfig) -> Path:
    """The workspace root: the folder of mkdocs.yml."""
    return Path(config.config_file_path).parent


def tutorial_sources(root: Path) -> list[Path]:
    """The tutorial modules, ``experiments/tutorials/*.py`` without ``__init__.py``, by name."""
    return sorted(p for p in (root / TUTORIALS).glob("*.py") if p.name != "__init__.py")


def tutorial_uri(source: Path) -> str:
    """Where the page of a tutorial module lives in the site's sources."""
    return f"tutorials/{source.stem}.md"


def _site_target(target: str) -> str:
    """A link target relative to the README, as seen from the site's root (``docs/``)."""
    path, sep, anchor = target.partition("#")
    if path.startswith("docs/"):
        path = path.removeprefix("docs/")
    elif path.startswith(f"{TUTORIALS.as_posix()}/") and path.endswith(".py"):
        path = tutorial_uri(Path(path))
    # Anything else is left as it is: mkdocs reports a link to a file it does not have.
    return path + sep + anchor


def readme_as_index(readme: str) -> str:
    """README.md's text as the site's home page: the same text, its relative links moved to the site."""
    return _RELATIVE_LINK.sub(lambda m: _site_target(m[1]), readme)


def tutorial_page(source: Path, root: Path) -> str:
    """The page of one tutorial module: title and text from its docstring, then its code."""
    code = source.read_text(encoding="utf-8")
    relative = source.relative_to(root).as_posix()
    module = ast.parse(code, filename=relative)
    docstring = ast.get_docstring(module)
    if not docstring:
        raise PluginError(f"{relative} has no module docstring: its first line is the tutorial's title")
    title, _, text = docstring.partition("\n")
    first = module.body[0]
    # The code after the docstring (the docstring is the page's text); end_lineno counts from 1.
    body = "".join(code.splitlines(keepends=True)[first.end_lineno or 0:]).lstrip("\n")
    longest_backticks = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest_backticks + 1)
    return (f"# {title.strip()}\n\n{literal_blocks_as_markdown(text).strip()}\n\n"
            f"`{relative}`:\n\n{fence}python\n{body}{fence}\n")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Fill the nav's Tutorials section with one page per tutorial module."""
    section = next((item for item in config.nav or [] if isinstance(item, dict) and TUTORIALS_SECTION in item),
                   None)
    if section is None:
        raise PluginError(f"mkdocs.yml's nav has no {TUTORIALS_SECTION!r} section for the tutorial pages")
    section[TUTORIALS_SECTION] = [{source.name: tutorial_uri(source)}
                                  for source in tutorial_sources(_root(config))]
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the home page (README.md) and the tutorial pages to the site's files."""
    root = _root(config)
    pages = {"index.md": readme_as_index((root / README).read_text(encoding="utf-8"))}
    pages.update({tutorial_uri(source): tutorial_page(source, root) for source in tutorial_sources(root)})
    for uri, content in pages.items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists, but that page is made from another file at build time; "
                              "remove it")
        files.append(File.generated(config, uri, content=content))
    return files
