"""``@tilejit.jit``: kernels compiled lazily from a program factory, once per argument set
(``JITFunction``), or specialised from the tensors of each call with ``layout=``
(``LayoutJITFunction``). Both keep one ``CompileOptions`` record.

Layouts (implicit conversion): ``@tilejit.jit(layout="dynamic")`` kernels are specialised
from the tensors of the call, as the CuTe DSL's ``@cute.jit`` treats framework tensors.
The decorated function is called with the kernel's own arguments. Each tensor argument
(any DLPack producer) reaches the function as a ``T.Buffer`` derived from the tensor,
named after the function's parameter: with ``layout="dynamic"`` its layout is fully
dynamic except the leading dimension's stride (1) and broadcast strides (0), so the
compiled kernel serves every shape with the same leading dimension; with
``layout="static"`` it is the tensor's exact layout. A view made by
``tilejit.from_dlpack`` keeps the layout it was marked with. Every other argument is a
compile-time constant, passed unchanged and part of the cache key. The function returns
a ``Program`` whose inputs are those buffers (in any order; outputs are declared by the
function and named by ``out_idx``); the call compiles it once per key, then runs it on
the call's tensors and returns its outputs.

>>> @tilejit.jit(layout="dynamic")
... def scale(A, B, factor: float = 2.0):
...     return tilejit.Program(name="scale", params=[A, B], source=make_source(A, B, factor))
>>> scale(torch.rand(30, 20), torch.empty(30, 20))   # compiles: A is (?,?):(?,1)
>>> scale(torch.rand(7, 3), torch.empty(7, 3))       # same kernel
>>> scale(x.t(), y.t())                              # (?,?):(1,?): one new compile

Each tensor is imported once per call (into a view, which the kernel then takes as it
is). Views need the compiled wrapper; without it the call raises ``RuntimeError``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading

from ..language.lang import buffer_like
from ..language.program import Program
from . import frameworks, host
from .compilation import CompileErrors, CompileOptions, compile, compile_many
from .fast_paths import FAST_PATHS
from .kernel import JITKernel
from .views import _wrapper, from_dlpack, is_view

LAYOUTS = ("dynamic", "static")
_NO_NAMES = itertools.repeat(None)


def bind_arguments(signature: inspect.Signature, function: str, args, kwargs):
    """``signature.bind(*args, **kwargs)``; arguments the function does not take are
    refused in its name (``f(): too many positional arguments``), as Python's own call
    refuses them."""
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as exc:  # inspect's words, without the function's name
        raise TypeError(f"{function}(): {exc}") from None


class LayoutJITFunction:
    """A kernel factory specialised from the tensors it is called with (see the module
    docstring); made by ``tilejit.jit(layout="dynamic" | "static")``."""

    def __init__(self, func, layout, options: CompileOptions):
        if layout not in LAYOUTS:
            raise ValueError(f"jit: layout must be None, 'dynamic' or 'static', got {layout!r}")
        self.func = func
        self.layout = layout
        self._implicit = layout == "dynamic"
        self._signature = inspect.signature(func)
        params = list(self._signature.parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            raise TypeError(f"{func.__name__}: jit(layout={layout!r}) needs named parameters, "
                            "not *args or **kwargs")
        self._names = [p.name for p in params]
        self.options = options  # every option of jit(), as JITFunction keeps them
        self._kernels: dict = {}  # canonical key -> (kernel, argument names in kernel order)
        self._calls: dict = {}  # raw call key -> (kernel, view indices in kernel order)
        self._lock = threading.Lock()
        self._classify = None
        functools.update_wrapper(self, func)
        frameworks.register_traced(self)
        frameworks.load_present()  # a tracing framework imported already installs its tracer

    def _views(self, args, kwargs):
        """Per tensor argument what the kernel gets and its key, and the raw key of the
        call (the wrapper's ``_jit_arguments``)."""
        classify = self._classify
        if classify is None:
            classify = self._classify = _wrapper()._jit_arguments
        items = zip(_NO_NAMES, args)
        if kwargs:
            items = itertools.chain(items, kwargs.items())
        return classify(items, self._implicit)

    def _resolve(self, args, kwargs, views, keys, raw):
        """The kernel for a call not seen before, compiling it if its key is new."""
        fname = self.func.__name__
        bound = bind_arguments(self._signature, fname, args, kwargs)
        index_of, j = {}, 0  # tensor argument name -> its index in views and keys
        for name, part in zip([*self._names[:len(args)], *kwargs], raw):
            if len(part) == 2:  # (name, key); constants are (name, type, value)
                index_of[name] = j
                j += 1
        bound.apply_defaults()
        key = []
        for name, value in bound.arguments.items():
            if name in index_of:
                key.append((name, keys[index_of[name]]))
                continue
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"{fname}: argument '{name}' of type {type(value).__name__} "
                                "is unhashable; jit arguments must be hashable") from None
            key.append((name, type(value), value))
        key = tuple(key)
        with self._lock:
            entry = self._kernels.get(key)
            if entry is None:
                entry = self._compile(bound, index_of, views)
                self._kernels[key] = entry
            kernel, names = entry
            order = tuple(index_of[name] for name in names)
            try:
                self._calls[raw] = (kernel, order)
            except TypeError:
                pass  # an unhashable constant: the canonical key serves it every time
        return kernel, order

    def _compile(self, bound, index_of, views):
        fname = self.func.__name__
        buffers = {}
        for name, index in index_of.items():
            view = views[index]
            implicit = self._implicit and not is_view(bound.arguments[name])
            if not is_view(view):
                view = from_dlpack(view)
            buffers[name] = buffer_like(view, name=name, implicit=implicit)
            bound.arguments[name] = buffers[name]
        program = self.func(*bound.args, **bound.kwargs)
        if not isinstance(program, Program):
            raise TypeError(f"{fname}: a jit(layout={self.layout!r}) function must return a "
                            f"tilejit.Program, got {type(program).__name__}")
        kernel = compile(program, **self.options.as_kwargs())
        outputs = set(kernel.out_idx)
        by_id = {id(buffer): name for name, buffer in buffers.items()}
        names = []
        for i, param in enumerate(program.params):
            if i in outputs:
                continue
            name = by_id.get(id(param))
            if name is None:
                raise TypeError(
                    f"{fname}: kernel parameter {i} ({param!r}) is not one of the tensor "
                    f"arguments' buffers; with jit(layout={self.layout!r}) every input of the "
                    "program is the T.Buffer a tensor argument arrives as (declare outputs "
                    "with out_idx)")
            names.append(name)
        return kernel, tuple(names)

    def __call__(self, /, *args, **kwargs):
        if frameworks.compiling():  # traced by torch.compile (frameworks.traceable)
            return frameworks.deferred_entry("layout")(self, *args, **kwargs)
        stream = host.pop_stream(kwargs, self._names)
        views, keys, raw = self._views(args, kwargs)
        try:
            kernel, order = self._calls[raw]
        except (KeyError, TypeError):
            kernel, order = self._resolve(args, kwargs, views, keys, raw)
        return kernel(*[views[j] for j in order], stream=stream)

    def compile_for(self, *args, **kwargs):
        """The ``JITKernel`` a call with these arguments runs (compiled if needed), without
        running it."""
        return self.entry_for(*args, **kwargs)[0]

    def entry_for(self, *args, **kwargs):
        """``(kernel, order)`` for a call with these arguments: the kernel it runs
        (compiled if needed) and, for each kernel input, the index of the tensor argument
        it is (tensor arguments counted in call order, positional then keyword)."""
        host.pop_stream(kwargs, self._names)
        views, keys, raw = self._views(args, kwargs)
        try:
            return self._calls[raw]
        except (KeyError, TypeError):
            return self._resolve(args, kwargs, views, keys, raw)

    def cache_info(self) -> int:
        """Number of distinct compiled kernels held."""
        return len({id(entry[0]) for entry in self._kernels.values()})


# What torch.compile traces for a call of a ``LayoutJITFunction`` (the kernel specialised
# from the tensors' layouts at trace time, outside the graph, running as its op) is the
# tracing adapter's "layout" entry; Dynamo inlines it in place of ``__call__``.
frameworks.traceable(LayoutJITFunction.__call__, "layout", FAST_PATHS)


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

    def warmup(self, calls, *, workers=None, progress=None, executor=None) -> list[JITKernel]:
        """Compiles the kernels of many calls at once, as ``tilejit.compile_many`` does
        (on ``executor``'s workers when given), and returns them in order; later calls
        with those arguments find them. Each item of ``calls`` is a tuple of positional
        arguments, a dict of keyword arguments, or a ``(args, kwargs)`` pair; a single
        non-tuple value is one positional argument.

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
                                     progress=progress, executor=executor,
                                     **self.options.as_kwargs())
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
    layouts (the module's docstring).

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
