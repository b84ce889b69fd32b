"""rigging.fields: the mark that keeps a config field out of identities."""

from __future__ import annotations

import dataclasses

import pytest

from rigging.fields import UNHASHED, is_hashed, unhashed_field


@dataclasses.dataclass(frozen=True)
class _Config:
    rate: float = 0.1
    log_every: int = unhashed_field(default=10)
    note: str = unhashed_field(default="", metadata={"help": "free text"})
    tags: tuple = unhashed_field(default_factory=tuple)


def test_marked_fields_are_not_hashed_and_keep_their_defaults_and_metadata() -> None:
    fields = {f.name: f for f in dataclasses.fields(_Config)}
    assert [name for name, f in fields.items() if is_hashed(f)] == ["rate"]
    assert fields["note"].metadata == {"help": "free text", UNHASHED: True}
    config = _Config()
    assert (config.log_every, config.note, config.tags) == (10, "", ())


def test_field_keywords_are_passed_through() -> None:
    with pytest.raises(TypeError):
        unhashed_field(default=1, no_such_keyword=2)
