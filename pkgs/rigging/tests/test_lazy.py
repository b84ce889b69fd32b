"""rigging.lazy: package attributes load on first use, and only then."""

from __future__ import annotations

import pytest

from rigging.lazy import lazy_getattr


def test_names_resolve_on_first_use_and_unknown_names_raise() -> None:
    getattr_ = lazy_getattr("pkg", {"dumps": "json", "sqrt": "math"})
    import json
    import math

    assert getattr_("dumps") is json.dumps and getattr_("sqrt") is math.sqrt
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        getattr_("nope")
