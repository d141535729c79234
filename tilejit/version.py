"""tilejit's version: the package's ``__version__`` and part of every kernel's cache key
(a new release never reuses an older one's artifacts). pyproject.toml holds the same."""

VERSION = "0.1.0"
