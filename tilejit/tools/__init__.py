"""Command-line tools: ``python -m tilejit bench``, ``demo`` and ``doctor``."""
