"""What ``torch.compile`` traces for calls of tilejit's callables: a kernel's call, a
``@tilejit.jit`` function's and a ``jit(layout=...)`` function's each become the kernel's
op in the graph. The kernel is found (compiled, specialised) and its op registered while
Dynamo traces, outside the graph, by functions Dynamo calls at trace time and keeps the
results of as constants. Dynamo inlines these entries in place of the callables'
``__call__`` (``tilejit.runtime.frameworks.traceable``)."""

from __future__ import annotations

import functools

import torch

from ...builder.torch_schema import NAMESPACE
from ...runtime import frameworks, host
from ...runtime.fast_paths import FAST_PATHS
from .op import call_op, definition, is_defined


def _constant_at_trace_time(fn):
    """``torch.compiler.assume_constant_result``: Dynamo calls ``fn`` while it traces and
    keeps the result as a constant. The decorator imports Dynamo (seconds) to set one
    attribute; this module loads in every process that makes a kernel with torch loaded,
    most of which never compile, so the fast path sets the attribute here (a test checks
    that it is the decorator's); with ``TILEJIT_FAST_PATHS=0`` the decorator itself."""
    if not FAST_PATHS:
        return torch.compiler.assume_constant_result(fn)
    fn._dynamo_marked_constant = True
    return fn


def _registered_op_name(kernel) -> str:
    """The op name, the op registered (with every live kernel's: ``_define_alive``)."""
    definition(kernel)
    _define_alive(kernel)
    return kernel.artifact.op_name


@_constant_at_trace_time
def _traced_op_entry(key: str) -> tuple:
    """``(op name, whether it returns several outputs)`` for the kernel ``key`` names
    (``frameworks.register_traced``), computed and the op registered while Dynamo traces,
    outside the graph: Dynamo calls this at trace time and keeps the result as a
    constant."""
    kernel = frameworks.traced_object(key)
    return _registered_op_name(kernel), len(kernel.artifact.signature.out_idx) > 1


# The op namespace, read once: every global a traced call reads is a guard each call of
# the compiled function checks (``torch.ops.tilejit`` alone would be four).
_namespace = getattr(torch.ops, NAMESPACE)


def _define_alive(kernel) -> None:
    """Registers the op of every kernel alive. A graph torch.compile loads from its caches
    is not traced again: an op that only a registered backward calls (whose kernel
    tracing would have met) must already exist when the graph runs."""
    for other in list(type(kernel)._alive):
        if not is_defined(other):
            try:
                definition(other)
            except (TypeError, ValueError, RuntimeError):
                pass  # not expressible as an op (a T.Pointer): it says so if ever traced


def traced_call(kernel, /, *args, **keywords):
    """What ``torch.compile`` traces for ``kernel(*args, **keywords)``: the kernel's op.
    Dynamo inlines it in place of the kernel's ``__call__`` (``frameworks.traceable``)."""
    # Without keywords nothing is traced but the op, read through the fewest globals:
    # every attribute and global read here is a guard that each call of the compiled
    # function checks (measured: about 80 ns each).
    name, several = _traced_op_entry(kernel._trace_key)
    if keywords:
        args, stream = kernel._positional(args, keywords)
        return call_op(name, *args, stream=stream)
    result = getattr(_namespace, name).default(*args)
    return list(result) if several else result


@_constant_at_trace_time
def _jit_op_name(key: str, /, *args, **kwargs) -> str:
    """Compiles (or finds) the kernel a call of the jit function ``key`` names makes and
    registers its op, at trace time, outside the graph."""
    return _registered_op_name(frameworks.traced_object(key).kernel_for(*args, **kwargs))


def traced_jit_call(function, /, *args, **kwargs):
    """What ``torch.compile`` traces for ``factory(*args, **kwargs)`` of a
    ``@tilejit.jit`` function: the kernel it returns, as a callable of its op."""
    return functools.partial(call_op, _jit_op_name(function._trace_key, *args, **kwargs))


@_constant_at_trace_time
def _layout_entry(key: str, /, *args, **kwargs) -> tuple:
    """``(op name, order)`` of the kernel a call of the ``jit(layout=...)`` function
    ``key`` names runs, specialised and registered at trace time from the tensors'
    example values (Dynamo hands this function real tensors), outside the graph."""
    kernel, order = frameworks.traced_object(key).entry_for(*args, **kwargs)
    return _registered_op_name(kernel), order


def traced_layout_call(function, /, *args, **kwargs):
    """What ``torch.compile`` traces for a call of a ``jit(layout=...)`` function: its
    kernel's op on the tensor arguments, in the kernel's order. The layout the kernel was
    specialised for is not guarded: a later call whose layout the kernel does not accept
    fails its validation (ValueError), as a direct call of that kernel would."""
    stream = host.pop_stream(kwargs, function._names) if kwargs else None
    name, order = _layout_entry(function._trace_key, *args, **kwargs)
    tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
    return call_op(name, *[tensors[j] for j in order], stream=stream)


# What Dynamo inlines for each kind of call (``frameworks.traceable``).
ENTRIES = {"kernel": traced_call, "jit": traced_jit_call, "layout": traced_layout_call}
