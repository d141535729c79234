"""The compiled Cython wrapper (``wrapper/_tilejit.pyx``) behind ``cython`` and ``dlpack``."""

from __future__ import annotations

_module = None


def wrapper_module():
    """The wrapper extension for this interpreter, built and cached on first use, and
    handed the Python functions it calls back (``tilejit.host``)."""
    global _module
    if _module is None:
        from .. import host
        from .._build import build_tools
        from ..pointer import Pointer

        module = build_tools.load_wrapper()
        module.configure(dlpack_capsule=host.dlpack_capsule, producer_error=host.producer_error,
                         allocate=host.allocate, framework_stream=host.framework_stream,
                         stream_handle=host.stream_handle, pointer_type=Pointer,
                         type_name=host.type_name, scalar_kind=host.scalar_kind,
                         view_check=host.view_check, lazy_view=host.lazy_view,
                         framework_claim=host.framework_claim)
        host.use_array_empty(module.empty)
        _module = module
    return _module
