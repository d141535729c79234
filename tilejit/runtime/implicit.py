"""Implicit conversion: ``@tilejit.jit(layout="dynamic")`` kernels specialised from the
tensors of the call, as the CuTe DSL's ``@cute.jit`` treats framework tensors.

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
from .compilation import CompileOptions, compile
from .fast_paths import FAST_PATHS
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


