"""Marin's ``iris.marin_fs.open_url``: :func:`rigging.filesystem.open_url`, re-exported."""

from rigging.filesystem import open_url

__all__ = ["open_url"]
