"""zephyr."""
