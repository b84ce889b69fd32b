"""marin."""
