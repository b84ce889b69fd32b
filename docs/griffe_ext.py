"""A Griffe extension for the API reference: docstrings read as Markdown, each object documented once.

- The project's docstrings name other objects with Sphinx roles (``:func:`name```,
  ``:class:`~pkg.mod.Name```) and end a paragraph with ``::`` before an indented block.
  mkdocstrings reads Markdown, which would show the role's name and a doubled colon. A role
  becomes a cross-reference that links where its target is documented on the site and is plain
  code where it is not. A name that means nothing in the docstring's scope, or a path into the
  docstring's own package that names nothing there, is a warning (an error under
  ``mkdocs build --strict``), so a renamed function cannot leave a stale reference behind.
- A module's ``__all__`` may list names it imports (``levanter.trainer`` re-exports its configs);
  an object is documented in the module that defines it, not again on every page re-exporting it.

Named in mkdocs.yml (the ``extensions`` of mkdocstrings' python handler); ``hooks.py`` uses
:func:`literal_blocks_as_markdown` for the tutorials' docstrings.
"""

from __future__ import annotations

import html
import importlib.util
import re
from typing import Any

from griffe import (
    AliasResolutionError,
    CyclicAliasError,
    Extension,
    GriffeLoader,
    Module,
    NameResolutionError,
    Object,
    logger,
)

# ``:role:`target``` and ``:role:`~target```: the roles of Sphinx's Python domain.
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`(~?)([\w.]+)(?:\(\))?`")
# A paragraph ending in ``::`` introduces a literal block: "text::" reads "text:", "text ::" reads
# "text", and a line of only "::" disappears (as docutils renders them).
_LITERAL_MARKER = re.compile(r"(?:(?P<lone>^[ \t]*)|(?<=\S)(?P<spaced> )?)::[ \t]*$", re.MULTILINE)


def literal_blocks_as_markdown(text: str) -> str:
    """``text::`` before an indented block as Markdown writes it (the block is already code there)."""
    return _LITERAL_MARKER.sub(lambda m: "" if m["lone"] is not None or m["spaced"] else ":", text)


def _is_module_name(name: str) -> bool:
    """Whether ``name`` is an importable top-level module (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _names_nothing(loader: GriffeLoader, package: str, identifier: str) -> bool:
    """Whether ``identifier``, a path into the loaded ``package``, is missing from it (other
    packages may not be loaded yet: a path into one is not judged)."""
    if identifier.split(".", 1)[0] != package:
        return False
    try:
        loader.modules_collection[identifier]
    except KeyError:
        return True
    except (AliasResolutionError, CyclicAliasError):
        return False  # through a name imported from a package not loaded yet
    return False


def _reference(obj: Object, tilde: str, target: str, loader: GriffeLoader, package: str) -> str:
    """The cross-reference that a role naming ``target`` in ``obj``'s docstring stands for."""
    head, _, rest = target.partition(".")
    try:
        path = obj.resolve(head)
    except NameResolutionError:
        path = head if head in loader.modules_collection.members or _is_module_name(head) else None
    identifier = None if path is None else f"{path}.{rest}" if rest else path
    if identifier is None or _names_nothing(loader, package, identifier):
        lineno = obj.docstring.lineno if obj.docstring else obj.lineno
        logger.warning(f"{obj.relative_filepath}:{lineno}: the docstring of {obj.path} refers to "
                       f"`{target}`, which names nothing" + (" in its scope" if identifier is None else ""))
        return f"`{target}`"
    shown = target.rsplit(".", 1)[-1] if tilde else target
    # Optional: a target that is not rendered on the site is shown as code, without a warning.
    return (f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(shown)}</code></autoref>")


def docstring_as_markdown(obj: Object, text: str, loader: GriffeLoader, package: str) -> str:
    """``text``, a docstring of ``obj`` in ``package``, with its roles and literal-block markers as Markdown."""
    return literal_blocks_as_markdown(_ROLE.sub(lambda m: _reference(obj, m[1], m[2], loader, package), text))


class ApiReference(Extension):
    """Rewrites the docstrings of a package and hides its re-exports, once the package is loaded
    (names in docstrings resolve only then)."""

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the docstrings of ``pkg`` and of everything defined in it; hide re-exports."""
        pending: list[Object] = [pkg]
        while pending:
            obj = pending.pop()
            if obj.docstring is not None:
                obj.docstring.value = docstring_as_markdown(obj, obj.docstring.value, loader, pkg.name)
            for member in obj.members.values():
                if not member.is_alias:
                    pending.append(member)  # type: ignore[arg-type]
                elif obj.is_module:
                    member.public = False
