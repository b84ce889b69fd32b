"""iris."""
