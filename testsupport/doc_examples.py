"""The Python examples of the README and the guides: every fenced ``python`` block, so tests can
run each one as written (signatures and sketches are fenced ``text``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DocExample", "doc_examples"]

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class DocExample:
    """One ``python`` block: where it is (a path relative to the repository, its first line) and its code."""

    path: str
    line: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def doc_examples(root: Path = ROOT) -> list[DocExample]:
    """Every ``python`` block of ``README.md`` and ``docs/**/*.md``, in file and line order."""
    found = []
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            found.append(DocExample(str(path.relative_to(root)), line, match.group(1)))
    return found
