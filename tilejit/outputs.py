"""Allocating ``out_idx`` outputs with the framework of the first tensor argument.

torch in -> torch out (same device), NumPy or any other producer in -> NumPy out.
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


def _framework(cls: type) -> str:
    module = getattr(cls, "__module__", "") or ""
    return "torch" if module.split(".")[0] == "torch" else "numpy"


def make_allocator(kernel: str, out_names: Sequence[str], out_dtypes: Sequence[str]) -> Callable:
    """Returns ``allocate(like, shape, index)`` for the wrapper's hot path."""
    cache: dict[tuple[type, int], Callable] = {}

    def allocate(like, shape, index):
        key = (type(like), index)
        fn = cache.get(key)
        if fn is None:
            with _lock:
                make = _torch_allocator if _framework(key[0]) == "torch" else _numpy_allocator
                fn = cache.setdefault(key, make(out_dtypes[index]))
        try:
            return fn(like, shape)
        except TypeError as exc:
            raise TypeError(f"{kernel}: output '{out_names[index]}': {exc}") from None

    return allocate
