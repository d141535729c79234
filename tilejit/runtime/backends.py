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

from . import binding, cython_backend, frameworks
from .ctypes_backend import CtypesKernel
from .fast_paths import FAST_PATHS
from .fast_paths import decided as _decided

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
        try:
            cython_backend.wrapper_module()
            _wrapper_state.append(True)
        except Exception as exc:  # noqa: BLE001 - any build failure means: fall back
            warnings.warn(f"tilejit: the Cython wrapper is unavailable ({exc}); "
                          "execution_backend='auto' uses the slower 'ctypes' backend",
                          RuntimeWarning, stacklevel=3)
            _wrapper_state.append(False)
    return _wrapper_state[0]


def _python_call(entry):
    """The ``__call__`` of a kernel class: ``k.__call__(...)`` and ``type(k).__call__(k,
    ...)`` make the call ``k(...)`` makes, through ``entry(k, *args, **keywords)``. A tracer
    (Dynamo) inlines it, and ``frameworks.compiling()`` (``torch.compiler.is_compiling``,
    public) makes the traced call the kernel's op (``JITKernel._traced_call``)."""

    def __call__(self, /, *args, **keywords):
        if frameworks.compiling():
            return type(self)._traced_call(self, *args, **keywords)
        return entry(self, *args, **keywords)

    return __call__


def _direct_call(entry):
    """The ``__call__`` of a kernel class with the fast paths: the backend's call, which
    Dynamo never runs (``_torchdynamo_inline`` names what it inlines instead)."""

    def __call__(self, /, *args, **keywords):
        return entry(self, *args, **keywords)

    return __call__


def _ctypes_entry(kernel, /, *args, **keywords):
    return kernel._entry(*args, **keywords)


def kernel_class(base: type, name: str) -> type:
    """The JITKernel subclass running through backend ``name`` (created once).

    Its ``__call__`` makes the backend's call: the ctypes kernel's builtin entry, or the
    wrapper's kernel type's own; ``k(...)``, ``k.__call__(...)`` and
    ``type(k).__call__(k, ...)`` are the same call. Under a tracer (torch.compile) the call
    is the kernel's op (``base._traced_call``): Dynamo inlines ``__call__``, whose
    ``frameworks.compiling()`` takes the traced branch (``_python_call``).

    Two fast paths, on unless ``TILEJIT_FAST_PATHS=0``, make the same calls cheaper:
    the wrapper's kernel classes get CPython's vectorcall protocol
    (``_enable_vectorcall``: ``k(...)`` then reaches the core with the arguments in
    place, where ``__call__`` costs a Python frame and an argument tuple), and
    ``__call__`` is the backend's call alone (``_direct_call``), with Dynamo's
    ``_torchdynamo_inline`` naming the traced call it inlines in its place
    (``frameworks.traceable``).
    """
    cls = _classes.get(name)
    if cls is None:
        if name == "ctypes":
            impl = CtypesKernel
            call = impl.__call__ if FAST_PATHS else _python_call(_ctypes_entry)
        else:
            impl = cython_backend.wrapper_module().Kernel
            call = (_direct_call if FAST_PATHS else _python_call)(impl.__call__)
        frameworks.traceable(call, "kernel", FAST_PATHS)
        cls = type(f"{name.capitalize()}JITKernel", (base, impl),
                   {"__module__": base.__module__, "__doc__": base.__doc__, "__call__": call})
        if name != "ctypes" and FAST_PATHS:
            # Calls straight into the wrapper's vectorcall entry (no argument tuple).
            cython_backend.wrapper_module()._enable_vectorcall(cls)
        _decided("vectorcall (CPython type flags)", FAST_PATHS,
                 "set on the wrapper's kernel classes" if FAST_PATHS else "TILEJIT_FAST_PATHS=0")
        if frameworks.tracer_installed():
            _decided("Dynamo inline (_torchdynamo_inline)", FAST_PATHS,
                     "set on every kernel class's __call__" if FAST_PATHS else
                     "TILEJIT_FAST_PATHS=0: Dynamo inlines __call__ (torch.compiler.is_compiling)")
        _classes[name] = cls
    return cls


def bind(kernel, name: str, core_kernel, out_order: tuple) -> None:
    """Attaches the built core kernel (``tilejit.native.library.CoreKernel``) to the
    backend's side of ``kernel``, as a call plan (``tilejit.runtime.binding.Plan``).
    ``out_order[j]`` is the core's number (declaration order) of the j-th returned
    output."""
    plan = binding.Plan(kernel, core_kernel, name != "dlpack", out_order)
    kernel._attach_plan(plan)
    kernel.__dict__["_call_plan"] = plan


def own_entry(kernel, name: str, core_kernel, out_order: tuple, *, unclaimed: bool):
    """A builtin function calling ``kernel`` through a plan of its own, which keeps the
    kernel class's meanings whatever runner the kernel's plan hands claimed calls to:
    ``unclaimed``, a plan whose calls no framework claims (``tj_host_plan.unclaimed``:
    the implementation of the kernel's torch op); else one that validates every call
    before a framework claims it (what a runner taking claims at once passes a call it
    does not run itself). The caller keeps the returned ``(function, plan)`` alive
    together."""
    plan = binding.Plan(kernel, core_kernel, name != "dlpack", out_order, unclaimed=unclaimed)
    return binding.entry(plan), plan
