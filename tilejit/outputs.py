"""Allocating ``out_idx`` outputs with the framework of the first tensor argument.

torch in -> torch out (same device); NumPy or any other producer in -> NumPy out; no
tensor argument at all (scalars, pointers) or tilejit Arrays in -> tilejit Arrays out.
The per-(type, dtype) choice is made once and cached, so a call pays one dict
lookup and the framework's own allocation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Callable

_lock = threading.Lock()


def _torch_allocator(dtype: str) -> Callable:
    import torch

    tdtype = getattr(torch, dtype)
    empty = torch.empty

    def allocate(like, shape):
        return empty(shape, dtype=tdtype, device=like.device)

    return allocate


def _numpy_allocator(dtype: str) -> Callable:
    import numpy

    try:
        ndtype = numpy.dtype(dtype)
    except TypeError:
        ndtype = None
    if ndtype is None or ndtype.name != dtype:

        def refuse(like, shape):
            raise TypeError(f"NumPy has no dtype {dtype}: pass torch tensors to allocate a "
                            f"{dtype} output")

        return refuse
    empty = numpy.empty

    def allocate(like, shape):
        return empty(shape, dtype=ndtype)

    return allocate


def _tilejit_allocator(dtype: str) -> Callable:
    """tilejit's own Array when the wrapper is there (no framework needed), else NumPy."""
    from .backends import cython_backend

    try:
        empty = cython_backend.wrapper_module().empty
    except Exception:  # noqa: BLE001 - no wrapper: NumPy is the next best host allocator
        return _numpy_allocator(dtype)

    def allocate(like, shape):
        return empty(shape, dtype)

    return allocate


def _framework(cls: type) -> str:
    if cls is type(None):
        return "tilejit"
    module = (getattr(cls, "__module__", "") or "").split(".")[0]
    return module if module in ("torch", "tilejit") else "numpy"


_ALLOCATORS = {"torch": _torch_allocator, "numpy": _numpy_allocator,
               "tilejit": _tilejit_allocator}


def make_allocator(kernel: str, out_names: Sequence[str], out_dtypes: Sequence[str]) -> Callable:
    """Returns ``allocate(like, shape, index)`` for the wrapper's hot path."""
    cache: dict[tuple[type, int], Callable] = {}

    def allocate(like, shape, index):
        key = (type(like), index)
        fn = cache.get(key)
        if fn is None:
            with _lock:
                make = _ALLOCATORS[_framework(key[0])]
                fn = cache.setdefault(key, make(out_dtypes[index]))
        try:
            return fn(like, shape)
        except TypeError as exc:
            raise TypeError(f"{kernel}: output '{out_names[index]}': {exc}") from None

    return allocate
