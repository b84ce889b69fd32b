"""Cross-package and end-to-end tests (a package so `python -m tests.soak` works)."""
