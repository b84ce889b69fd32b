"""The ``marin`` command line: one module per verb."""
