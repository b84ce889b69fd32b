"""Marin's executor API (``ExecutorStep``, ``executor_main``, ``ArtifactStep``) over this project's steps."""
