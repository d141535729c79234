"""NumPy as the runtime sees it: outputs from ``numpy.empty``. It is also the framework of
any tensor type no adapter knows (a ``__dlpack__`` producer of another library): its
outputs are NumPy arrays."""

from __future__ import annotations

import numpy

from ..runtime import frameworks


class NumpyAdapter(frameworks.Adapter):
    name = "numpy"

    def allocator(self, dtype: str, device: tuple[int, int]):
        try:
            ndtype = numpy.dtype(dtype)
        except TypeError:
            ndtype = None
        if ndtype is None or ndtype.name != dtype:
            message = (f"NumPy has no dtype {dtype}: pass torch tensors to allocate a {dtype} "
                       "output")

            def refuse(shape):
                raise TypeError(message)

            return refuse
        empty = numpy.empty
        return lambda shape: empty(shape, dtype=ndtype)


ADAPTER = NumpyAdapter()
