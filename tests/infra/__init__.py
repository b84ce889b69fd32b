"""Tests of the project's own tooling: code size limits, the docs site and its examples, the Nix
check, xdist grouping and the test support fixtures."""
