"""``@tilejit.jit``: kernels compiled lazily from a program factory, once per argument set
(``JITFunction``), or specialised from the tensors of each call with ``layout=``
(``tilejit.runtime.implicit.LayoutJITFunction``). Both keep one ``CompileOptions`` record."""

from __future__ import annotations

import functools
import inspect
import threading

from . import frameworks
from .compilation import CompileErrors, CompileOptions, compile, compile_many
from .fast_paths import FAST_PATHS
from .implicit import LayoutJITFunction, bind_arguments
from .kernel import JITKernel

__all__ = ["JITFunction", "compile", "jit"]


class JITFunction:
    """A program factory compiled lazily, once per canonical argument set.

    >>> @tilejit.jit(out_idx=-1)
    ... def vec_add(block: int = 256):
    ...     return tilejit.Program(...)
    >>> k = vec_add(block=128)     # compiles; vec_add(128) is the same key
    """

    def __init__(self, func, options: CompileOptions):
        self.func = func
        self._signature = inspect.signature(func)
        self.options = options  # what every kernel of this function is compiled with
        self._kernels: dict = {}  # canonical key -> kernel
        # Exact call (args, kwargs items) -> kernel. A dict of its own: a raw key must never
        # meet a canonical one (`f(("block", 128))` is not `f(block=128)`).
        self._calls: dict = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, func)
        frameworks.register_traced(self)
        frameworks.load_present()  # a tracing framework imported already installs its tracer

    def _canonical_key(self, args, kwargs):
        bound = bind_arguments(self._signature, self.func.__name__, args, kwargs)
        bound.apply_defaults()
        # The type is part of the key: 1, 1.0 and True compare equal, but a factory may
        # build a different program for each.
        key = tuple((name, type(value), value) for name, value in bound.arguments.items())
        for name, _, value in key:
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"{self.func.__name__}: argument '{name}' of type "
                                f"{type(value).__name__} is unhashable; jit arguments must be "
                                "hashable (use tuples, not lists)") from None
        return key

    def __call__(self, /, *args, **kwargs) -> JITKernel:
        if frameworks.compiling():  # traced by torch.compile (frameworks.traceable)
            return frameworks.deferred_entry("jit")(self, *args, **kwargs)
        return self.kernel_for(*args, **kwargs)

    def kernel_for(self, /, *args, **kwargs) -> JITKernel:
        """The kernel a call with these arguments returns, compiled or found."""
        # Fast path: the exact call seen before (one dict lookup), types included as in
        # the canonical key.
        raw = (args, tuple(kwargs.items()), tuple(map(type, args)),
               tuple(map(type, kwargs.values())))
        try:
            return self._calls[raw]
        except KeyError:
            pass
        except TypeError:
            pass  # unhashable: the canonical path reports it by name
        key = self._canonical_key(args, kwargs)
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is None:
                program = self.func(*args, **kwargs)
                kernel = compile(program, **self.options.as_kwargs())
                self._kernels[key] = kernel
            try:
                self._calls[raw] = kernel
            except TypeError:
                pass
        return kernel

    def warmup(self, calls, *, workers=None, progress=None) -> list[JITKernel]:
        """Compiles the kernels of many calls at once, as ``tilejit.compile_many`` does,
        and returns them in order; later calls with those arguments find them. Each item
        of ``calls`` is a tuple of positional arguments, a dict of keyword arguments, or
        a ``(args, kwargs)`` pair; a single non-tuple value is one positional argument.

        A call that fails (its program cannot be made, or does not compile) does not stop
        the others: the kernels that compiled are kept (later calls find them), and once
        all have finished ``CompileErrors`` names every failed call, its ``kernels``
        holding the result of each call in order, ``None`` where it failed.

        >>> gemm.warmup([(64,), (128,), (256,)], workers=4)
        """
        items = []
        for call in calls:
            if isinstance(call, dict):
                items.append(((), call))
            elif (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], tuple)
                  and isinstance(call[1], dict)):
                items.append(call)
            elif isinstance(call, tuple):
                items.append((call, {}))
            else:
                items.append(((call,), {}))
        keys = [self._canonical_key(args, kwargs) for args, kwargs in items]
        missing: dict = {}
        failures: dict = {}  # key -> the exception of the first call with that key
        for key, (args, kwargs) in zip(keys, items):
            if key not in self._kernels and key not in missing and key not in failures:
                try:
                    missing[key] = self.func(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - reported with the others below
                    failures[key] = exc
        if missing:
            try:
                built = compile_many(list(missing.values()), workers=workers,
                                     progress=progress, **self.options.as_kwargs())
            except CompileErrors as exc:
                built = exc.kernels
                for (i, _), error in zip(exc.failed, exc.exceptions):
                    failures[list(missing)[i]] = error
            with self._lock:
                for key, kernel in zip(missing, built):
                    if kernel is not None:
                        self._kernels.setdefault(key, kernel)
        kernels = [self._kernels.get(key) for key in keys]
        if failures:
            failed = [(i, key) for i, key in enumerate(keys) if key in failures
                      and keys.index(key) == i]
            name = self.func.__name__
            lines = [f"  calls[{i}] {name}{_describe(items[i])}: "
                     f"{type(failures[key]).__name__}: {str(failures[key]).strip()}"
                     for i, key in failed]
            raise CompileErrors(
                f"{name}.warmup: {len(failed)} of {len(set(keys))} argument sets "
                "failed; the others compiled and are kept:\n" + "\n".join(lines),
                [failures[key] for _, key in failed],
                [(i, name) for i, _ in failed], kernels)
        return kernels

    def cache_info(self) -> int:
        """Number of distinct compiled kernels held."""
        return len({id(k) for k in self._kernels.values()})


def _describe(call: tuple) -> str:
    """A call's arguments as written: ``(64, tile=32)``."""
    args, kwargs = call
    words = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return "(" + ", ".join(words) + ")"


# What torch.compile traces for a call of a ``JITFunction`` (the kernel compiled or found at
# trace time, outside the graph, standing in the graph as its op) is the tracing adapter's
# "jit" entry; Dynamo inlines it in place of ``__call__``.
frameworks.traceable(JITFunction.__call__, "jit", FAST_PATHS)


def jit(func=None, *, out_idx=None, target=None, execution_backend=None, compile_flags=None,
        verbose=None, layout=None, arch=None, compiler=None):
    """Decorator: ``@tilejit.jit`` or ``@tilejit.jit(out_idx=-1, target="cpu")``.

    ``layout="dynamic"`` is implicit conversion: the function is called with the kernel's
    tensors, receives each as a ``T.Buffer`` with a fully dynamic layout except the
    leading-dimension stride, and the call compiles (once per leading dimension, dtype
    and constant arguments) and runs the kernel; ``layout="static"`` specialises on exact
    layouts. See ``tilejit.runtime.implicit``.

    >>> @tilejit.jit(layout="dynamic")
    ... def copy(A, B):
    ...     return tilejit.Program(name="copy", params=[A, B], source=...)
    >>> copy(x, y)
    """
    options = CompileOptions(out_idx=out_idx, target=target,
                             execution_backend=execution_backend, compile_flags=compile_flags,
                             verbose=verbose, arch=arch, compiler=compiler)

    def wrap(f):
        if layout is not None:
            return LayoutJITFunction(f, layout, options)
        return JITFunction(f, options)

    return wrap(func) if func is not None else wrap
