"""Tests of the project's own tooling: code size limits, the docs site, the Nix check, xdist
grouping and the test support fixtures."""
