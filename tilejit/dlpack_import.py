"""The Python side of importing a tensor that every backend shares: asking a producer for
its ``__dlpack__`` capsule, and turning a producer's refusal into tilejit's error.

Both run only off the fast path (the DLPack C exchange API needs neither).
"""

from __future__ import annotations

MAX_VERSION = (1, 3)


def dlpack_capsule(obj):
    """``obj.__dlpack__()`` as a DLPack 1.3 consumer asks for it.

    A producer older than DLPack 1.0 takes no ``max_version``. A torch tensor that
    requires grad refuses to export, but a kernel reads and writes its storage as it
    would through the exchange API, so its detached alias (same storage) is exported.
    """
    try:
        return obj.__dlpack__(max_version=MAX_VERSION)
    except TypeError:
        return obj.__dlpack__()
    except BufferError:
        if getattr(obj, "requires_grad", False) and hasattr(obj, "detach"):
            return dlpack_capsule(obj.detach())
        raise


def import_failure(label: str, exc: BaseException) -> Exception:
    """The exception for a producer that could not hand over a tensor: the same class and
    message whichever backend and protocol asked. A wrong kind of object stays a
    TypeError; any other refusal (BufferError, RuntimeError, ...) is a ValueError. Only
    the first line of the producer's message is kept (torch appends a C++ backtrace).
    """
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    cls = TypeError if isinstance(exc, TypeError) else ValueError
    return cls(f"{label}: cannot import the tensor through DLPack: {text}")
