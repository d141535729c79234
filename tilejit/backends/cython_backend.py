"""The compiled Cython wrapper (``wrapper/_tilejit.pyx``) behind ``cython`` and ``dlpack``."""

from __future__ import annotations

_module = None


def wrapper_module():
    """The wrapper extension for this interpreter, built and cached on first use."""
    global _module
    if _module is None:
        try:
            from .._build_tools import load_wrapper
        except ImportError:  # a source checkout on sys.path, not installed
            from build_tools import load_wrapper

        _module = load_wrapper()
    return _module
