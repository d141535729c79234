"""Execution backends: how Python objects reach the core.

Every backend builds a callable from the same lowered signature and compiled
library; they differ only in how arguments are converted.
"""

from __future__ import annotations

BACKENDS = ("cython",)


def resolve(name: str | None) -> str:
    """``"auto"``/``None`` -> the default backend; unknown names raise ValueError."""
    if name in (None, "auto"):
        return "cython"
    if name not in BACKENDS:
        raise ValueError(f"unknown execution_backend {name!r}; available: auto, "
                         + ", ".join(BACKENDS))
    return name


def create(name: str, spec: tuple, library: str, entry: str, allocate):
    """A callable running the kernel through backend ``name``."""
    if name == "cython":
        from .cython_backend import create as make
    return make(spec, library, entry, allocate)
