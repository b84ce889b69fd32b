"""rigging: configuration, file systems, atomic writes, leases, logging and secrets."""

from rigging.config.discovery import Backend, ConfigError, MarinConfig, discover_config
from rigging.fields import unhashed_field
from rigging.secrets import Secret

__all__ = ["Backend", "ConfigError", "MarinConfig", "Secret", "discover_config", "unhashed_field"]
