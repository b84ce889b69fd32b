"""Supervised fine-tuning experiments: chat data, templates and assistant-only losses."""
