"""Streams: turning what a caller passes as ``stream=`` into a handle, and asking a
framework without the DLPack exchange API for its current stream.

Both backends use these off the hot path: only calls that pass a stream, or run on a
device through a producer without the exchange API, reach them.
"""

from __future__ import annotations


def stream_handle(stream, kernel: str) -> int:
    """A raw stream handle (``CUstream`` as an int) from an int, a ``torch.cuda.Stream``
    (``.cuda_stream``) or any object implementing ``__cuda_stream__``."""
    if isinstance(stream, bool):
        raise TypeError(f"{kernel}: stream must be a stream handle, got bool")
    if isinstance(stream, int):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    else:
        raise TypeError(f"{kernel}: stream must be an int handle, a torch.cuda.Stream or an "
                        f"object with __cuda_stream__, got {type(stream).__name__}")
    if not isinstance(handle, int) or not 0 <= handle < (1 << 64):
        raise ValueError(f"{kernel}: stream handle must be a non-negative int, got {handle!r}")
    return handle


def framework_stream(like, device_type: int, device_id: int) -> int:
    """The current stream of ``like``'s framework for a device, for producers without the
    exchange API (and the ``dlpack``/``ctypes`` backends); 0 (the default stream) when the
    framework has no notion of one."""
    module = (type(like).__module__ or "").split(".")[0]
    if module == "torch" and device_type in (2, 13):  # kDLCUDA, kDLCUDAManaged
        import torch

        return torch.cuda.current_stream(device_id).cuda_stream
    return 0
