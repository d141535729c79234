"""Execution backends: how Python objects reach the core.

Every backend runs the same lowered signature and the same compiled library; they
differ only in how arguments are converted:

- ``cython``: the compiled wrapper, producers' DLPack C exchange API first (torch),
  the ``__dlpack__`` protocol otherwise;
- ``dlpack``: the compiled wrapper, always the ``__dlpack__`` protocol;
- ``ctypes``: pure-Python marshalling into the core's shared library; needs no wrapper.

``auto`` is ``cython``, or ``ctypes`` (with a warning) when the wrapper cannot be built.

A backend is a mixin class that ``tilejit.JITKernel`` is combined with, so a call
goes straight into the backend's ``__call__`` with no Python layer in between.
"""

from __future__ import annotations

import warnings

BACKENDS = ("cython", "dlpack", "ctypes")

_classes: dict = {}


def resolve(name: str | None) -> str:
    """``"auto"``/``None`` -> the default backend; unknown names raise ValueError."""
    if name in (None, "auto"):
        return "cython" if _wrapper_available() else "ctypes"
    if name not in BACKENDS:
        raise ValueError(f"unknown execution_backend {name!r}; available: auto, "
                         + ", ".join(BACKENDS))
    return name


_wrapper_state: list = []


def _wrapper_available() -> bool:
    """Whether the Cython wrapper loads (building it if needed); decided once per process."""
    if not _wrapper_state:
        from .cython_backend import wrapper_module

        try:
            wrapper_module()
            _wrapper_state.append(True)
        except Exception as exc:  # noqa: BLE001 - any build failure means: fall back
            warnings.warn(f"tilejit: the Cython wrapper is unavailable ({exc}); "
                          "execution_backend='auto' uses the slower 'ctypes' backend",
                          RuntimeWarning, stacklevel=3)
            _wrapper_state.append(False)
    return _wrapper_state[0]


_traced_call = None  # what Dynamo inlines for a kernel call, once tilejit.torch_op is loaded


def kernel_class(base: type, name: str) -> type:
    """The JITKernel subclass running through backend ``name`` (created once).

    Its ``__call__`` is what ``torch.compile`` sees (``base._traced_call``, which traces
    the call as the kernel's custom op) while a call in Python runs the backend's own
    entry: the wrapper's vectorcall slot, which CPython calls before any ``__call__``,
    or the ctypes ``__call__``, whose ``_torchdynamo_inline`` names the function Dynamo
    inlines in its place (the attribute ``torch.compile`` itself marks its wrappers
    with). Neither costs an eager call anything.
    """
    cls = _classes.get(name)
    if cls is None:
        if name == "ctypes":
            from .ctypes_backend import CtypesKernel as impl

            call = impl.__call__
            call._torchdynamo_inline = _traced_call or base._traced_call
        else:
            from .cython_backend import wrapper_module

            impl = wrapper_module().Kernel
            call = base._traced_call
        cls = type(f"{name.capitalize()}JITKernel", (base, impl),
                   {"__module__": base.__module__, "__doc__": base.__doc__, "__call__": call})
        if name != "ctypes":
            # Calls straight into the wrapper's vectorcall entry (no argument tuple).
            wrapper_module()._enable_vectorcall(cls)
        _classes[name] = cls
    return cls


def trace_calls_with(traced_call) -> None:
    """Makes ``traced_call`` (``tilejit.torch_op.traced_call``) what Dynamo inlines for a
    call of a kernel of any backend, made or to be made: the ``_torchdynamo_inline`` of
    every kernel class's ``__call__``."""
    global _traced_call
    _traced_call = traced_call
    for cls in _classes.values():
        cls.__call__._torchdynamo_inline = traced_call


def bind(kernel, name: str, core_kernel, out_order: tuple) -> None:
    """Attaches the built core kernel (``tilejit.backends.core.CoreKernel``) to the
    backend's side of ``kernel``, as a call plan (``tilejit.backends.binding.Plan``).
    ``out_order[j]`` is the core's number (declaration order) of the j-th returned
    output."""
    from . import binding

    kernel._attach_plan(binding.Plan(kernel, core_kernel, name != "dlpack", out_order))
