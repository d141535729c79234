"""CuPy as the runtime sees it: arrays in through DLPack, exported for CuPy's current
stream; outputs from ``cupy.empty`` on the input's device; CuPy's current stream (that of
``with cupy.cuda.Stream():``) as the launch stream when no ``stream=`` is given, and a
``cupy.cuda.Stream`` accepted as ``stream=``. Element types come from tilejit's one table
(``tilejit.language.dtypes``); those CuPy has no dtype for (bfloat16, the float8s) are
refused for outputs, saying so."""

from __future__ import annotations

import cupy
import numpy

from ..language import dtypes
from ..native import abi
from ..runtime import frameworks

_CUDA_DEVICES = (abi.kDLCUDA, abi.kDLCUDAManaged)
# DLPack's stream -1: the producer synchronises nothing. The kernel launches on CuPy's
# current stream (what its arrays' work was ordered on), unless the caller gives stream=,
# whose ordering against CuPy's work is the caller's, as with any stream=.
_NO_SYNC = {"stream": -1}


def cupy_dtype(name: str) -> numpy.dtype | None:
    """CuPy's dtype (a NumPy dtype) for tilejit's element type ``name``, or None when CuPy
    has none of that width and kind (``dtypes.DType``: bfloat16, the float8s, whether or
    not ml_dtypes has taught NumPy their names)."""
    entry = dtypes.DTYPES[dtypes.canonical(name)]
    try:
        found = numpy.dtype(entry.name)
    except TypeError:
        return None
    # NumPy's own types only: ml_dtypes (which JAX imports) registers bfloat16 and the
    # float8s with NumPy (user-defined dtypes), which CuPy cannot make arrays of.
    if found.isbuiltin != 1 or found.name != entry.name or found.itemsize * 8 != entry.bits:
        return None
    return found


class CupyAdapter(frameworks.Adapter):
    name = "cupy"

    dlpack_keywords = _NO_SYNC

    def allocator(self, dtype: str, device: tuple[int, int]):
        found = cupy_dtype(dtype)
        if found is None or device[0] not in _CUDA_DEVICES:
            where = "" if device[0] in _CUDA_DEVICES else f" on DLPack device type {device[0]}"
            message = (f"expected an element type and device CuPy can allocate, found "
                       f"{dtype}{where}: CuPy has no such array; pass torch tensors to "
                       f"allocate a {dtype} output")

            def refuse(shape):
                raise TypeError(message)

            return refuse
        where, empty = cupy.cuda.Device(device[1]), cupy.empty

        def make(shape):
            with where:
                return empty(shape, dtype=found)

        return make

    def stream(self, device_type: int, device_id: int) -> int:
        if device_type in _CUDA_DEVICES:
            return cupy.cuda.get_current_stream(device_id).ptr
        return 0

    def stream_handle(self, stream) -> int | None:
        """A ``cupy.cuda.Stream`` (or ``ExternalStream``) given as ``stream=``: its ptr."""
        ptr = getattr(stream, "ptr", None)
        return ptr if isinstance(ptr, int) else None

    def tensor_from(self, values, dtype: str, device: str):
        if device != "cuda":
            raise ValueError(f"CuPy arrays live on CUDA devices, not {device!r}")
        found = cupy_dtype(dtype)
        if found is None:
            raise TypeError(f"CuPy has no dtype {dtype}")
        return cupy.asarray(values.astype(found))

    def device_timer(self, device: str):
        if device != "cuda":
            return None
        start, end = cupy.cuda.Event(), cupy.cuda.Event()

        def stop() -> float:
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) / 1e3  # ms -> s

        return start.record, stop


ADAPTER = CupyAdapter()
