"""Ages as people say them (``rigging.durations.format_age``)."""

from __future__ import annotations

import pytest

from rigging.durations import format_age


@pytest.mark.parametrize("seconds, said", [
    (0, "0 seconds"), (1, "1 second"), (59.9, "59 seconds"), (60, "1 minute"), (3599, "59 minutes"),
    (3600, "1 hour"), (7 * 3600 + 5, "7 hours"), (86400, "1 day"), (3 * 86400 + 60, "3 days"), (-5, "0 seconds"),
])
def test_an_age_is_said_in_its_largest_whole_unit(seconds: float, said: str) -> None:
    assert format_age(seconds) == said
