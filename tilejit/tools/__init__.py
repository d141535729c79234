"""Command-line tools: ``python -m tilejit bench`` (``--target cuda``: ``bench_cuda``),
``demo`` and ``doctor``."""
