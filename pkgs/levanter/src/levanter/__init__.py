"""levanter."""
