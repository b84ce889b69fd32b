"""Configuration discovery."""

from rigging.config.discovery import Backend, ConfigError, MarinConfig, discover_config, find_workspace_root

__all__ = ["Backend", "ConfigError", "MarinConfig", "discover_config", "find_workspace_root"]
