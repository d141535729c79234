"""Every JITKernel as a torch custom op: what ``torch.compile`` traces, what autograd
records, and how a kernel call reaches either.

tilejit already knows what a correct ``torch.library`` wrapper needs, so it writes the
wrapper itself, once per compiled kernel, on first use:

- the schema, from the signature: each input buffer a ``Tensor`` (``Tensor?`` when
  optional), each scalar a ``SymInt``, ``float`` or ``bool``, the ``out_idx`` outputs
  returned; every buffer the kernel may write (not ``const``, not an output) is
  annotated as mutated (``Tensor(a0!)``);
- a fake implementation that binds the symbols from the inputs' sizes and strides and
  evaluates the outputs' shape expressions on them, so symbolic sizes stay symbolic
  (``torch.compile(dynamic=True)`` compiles once for every size);
- a name unique and stable per compiled kernel: ``tilejit::<kernel name>_<hash>``, the
  hash of everything that makes the kernel what it is (signature, binary, backend).

How calls get here: a Python call of a kernel never does (it runs the backend's own entry,
see ``tilejit.backends.kernel_class``). Dynamo traces the kernel's Python-level
``__call__``, ``traced_call``, which emits the op. The core hands back the eager calls
torch must see (``claimed_call``: a tensor requires grad while grad mode is on, or a tensor
a tracer made) and they run as the op, so autograd records them.

>>> kernel.torch_op                      # registers tilejit::vec_add_<hash> on first use
tilejit.vec_add_1d4c...default
>>> torch.compile(lambda a, b: kernel(a, b), fullgraph=True)(a, b)
"""

from __future__ import annotations

import functools
import hashlib
import keyword
import threading
from pathlib import Path

import torch

from . import backends
from .cache import artifact_key
from .lang import Buffer, Expr, PointerParam, Scalar, Symbol

NAMESPACE = "tilejit"

_lock = threading.RLock()
_ops: dict = {}  # op name -> its OpOverload, once registered
_library = None  # the torch.library.Library fragment of the namespace, made on first use


def _constant_at_trace_time(fn):
    """``torch.compiler.assume_constant_result``: Dynamo calls ``fn`` while it traces and
    keeps the result as a constant. The decorator imports Dynamo (seconds) to set one
    attribute; this module loads in every process that makes a kernel with torch loaded,
    most of which never compile, so the attribute is set here (a test checks that it is
    the decorator's)."""
    fn._dynamo_marked_constant = True
    return fn


# ---- Naming ------------------------------------------------------------------------------


def op_name(kernel) -> str:
    """``<kernel name>_<16 hex digits>``: the hash covers the signature (prototype,
    lowered spec, out_idx), the target, the execution backend and the compiled
    binary's bytes, so equal kernels share a name in every process and different ones
    never do."""
    name = kernel.__dict__.get("_torch_op_name")
    if name is None:
        sig = kernel._sig
        files = [kernel.library_path, kernel._prebuilt]
        key = artifact_key(
            kind="torch_op", name=sig.name, prototype=sig.c_prototype, spec=sig.spec,
            out_idx=sig.out_idx, target=sig.target, backend=kernel.execution_backend,
            binaries=[hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files if f])
        name = kernel.__dict__.setdefault("_torch_op_name", f"{sig.name}_{key[:16]}")
    return name


def _arg_name(name: str) -> str:
    # Schema argument names are read back as Python identifiers; `out` marks out= variants.
    return f"{name}_" if keyword.iskeyword(name) or name == "out" else name


# ---- The schema and the fake implementation ----------------------------------------------


def schema(kernel) -> tuple[str, tuple[str, ...]]:
    """``(schema, mutated argument names)`` for ``kernel``.

    >>> schema(vec_add)
    ('(Tensor A, Tensor B) -> Tensor', ())
    """
    sig = kernel._sig
    outputs = set(sig.out_idx)
    args, mutated = [], []
    for i, param in enumerate(kernel.params):
        if i in outputs:
            continue
        name = _arg_name(sig.names[i])
        if isinstance(param, Buffer):
            alias = "" if param.const else f"(a{len(mutated)}!)"
            if alias:
                mutated.append(name)
            kind = f"Tensor{alias}{'?' if param.optional else ''}"
        elif isinstance(param, Scalar):
            kind = ("bool" if param.dtype == "bool" else
                    "float" if param.dtype.startswith("float") else "SymInt")
        else:
            assert isinstance(param, PointerParam)
            raise TypeError(f"{sig.name}: parameter {i} '{sig.names[i]}' is a T.Pointer, which "
                            "a torch op cannot take (it has no shape or device for torch to "
                            "trace); declare it as a T.Buffer to use the kernel in torch")
        args.append(f"{kind} {name}")
    count = len(sig.out_idx)
    returns = "Tensor" if count == 1 else f"({', '.join(['Tensor'] * count)})"
    return f"({', '.join(args)}) -> {returns}", tuple(mutated)


def _torch_dtype(name: str):
    return getattr(torch, name)


def _fake(kernel):
    """The fake implementation: outputs shaped from the inputs, symbols bound as the core
    binds them (from the first tensor that carries each), on the first tensor's device."""
    sig = kernel._sig
    params = kernel.params
    inputs = [i for i in range(len(params)) if i not in set(sig.out_idx)]
    default = torch.device("cuda" if sig.target == "cuda" else "cpu")

    def fake(*args):
        values: dict[Symbol, object] = {}
        device = None
        for position, (i, value) in enumerate(zip(inputs, args)):
            param = params[i]
            if not isinstance(param, Buffer) or value is None:
                continue
            _check_tensor(sig, position, i, param, value)
            device = value.device if device is None else device
            dims = list(zip(param.shape, value.shape))
            if param.strides is not None:
                dims += zip(param.strides, value.stride())
            for expr, size in dims:
                if isinstance(expr, Symbol):
                    values.setdefault(expr, size)
        outputs = []
        for i in sig.out_idx:
            shape = [e.evaluate(values) if isinstance(e, Expr) else e for e in params[i].shape]
            outputs.append(torch.empty(shape, dtype=_torch_dtype(params[i].dtype),
                                       device=device or default))
        return _returned(outputs)

    return fake


def _check_tensor(sig, position: int, index: int, param: Buffer, value) -> None:
    """What the core would refuse first and a tracer can tell without data: the dtype and
    the number of dimensions, with the core's wording."""
    label = f"{sig.name}: argument {position} '{sig.names[index]}'"
    if value.dtype != _torch_dtype(param.dtype):
        got = str(value.dtype).removeprefix("torch.")
        raise ValueError(f"{label}: expected dtype {param.dtype}, got {got}")
    if value.dim() != len(param.shape):
        raise ValueError(f"{label}: expected a {len(param.shape)}-d tensor, got "
                         f"{value.dim()}-d with shape {tuple(value.shape)}")


def _returned(outputs: list):
    """Outputs as the op returns them: one tensor, a tuple of several, or None."""
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def implementation(kernel):
    """The op's real implementation: the kernel itself, called by the dispatcher with no
    Python frame in between (inside a compiled region every Python frame also costs
    Dynamo's frame hook) on plain tensors. Under autograd grad mode is off, so the core
    claims nothing; it passes no stream, so a CUDA kernel launches on torch's current
    stream, the one a CUDA graph capture records. A kernel whose outputs may not be
    torch's (no required tensor input to allocate them like) gets them converted."""
    sig = kernel._sig
    if any(isinstance(p, Buffer) and not p.optional and i not in sig.out_idx
           for i, p in enumerate(kernel.params)) or not sig.out_idx:
        return kernel

    def impl(*args):
        return _returned([_as_tensor(out) for out in _as_list(kernel(*args))])

    return impl


def _as_list(result) -> list:
    return result if isinstance(result, list) else [result]


def _as_tensor(value):
    # Without a torch tensor argument, outputs are tilejit's own arrays.
    return value if isinstance(value, torch.Tensor) else torch.from_dlpack(value)


# ---- Registration ----------------------------------------------------------------------


def definition(kernel):
    """The OpOverload of ``kernel``, registered on first use.

    Registered with the dispatcher directly (``Library.define`` and ``impl``), not as a
    ``torch.library.custom_op``: a call then costs the dispatcher and the kernel's own
    call, about 3 us where custom_op's Python autograd and aliasing checks add 16 to every
    call (see ``python -m tilejit bench --torch-compile``). Autograd is registered only
    with a backward (``register_autograd``); eager calls that would need one raise first
    (``claimed_call``). An op that writes its arguments also bumps their version
    counters (``_versions_bumped``), as custom_op would.
    """
    global _library
    name = op_name(kernel)
    found = _ops.get(name)
    if found is not None:
        return found
    with _lock:
        found = _ops.get(name)
        if found is None:
            text, _ = schema(kernel)
            if _library is None:
                _library = torch.library.Library(NAMESPACE, "FRAGMENT")
            _library.define(name + text)
            _library.impl(name, implementation(kernel), "CompositeExplicitAutograd")
            torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(kernel), lib=_library)
            found = getattr(getattr(torch.ops, NAMESPACE), name).default
            written = [i for i, arg in enumerate(found._schema.arguments)
                       if arg.alias_info is not None and arg.alias_info.is_write]
            if written:
                _library.impl(name, _versions_bumped(found, written), "ADInplaceOrView",
                              with_keyset=True)
            _ops[name] = found
    return found


def _versions_bumped(op, written: list[int]):
    """The ADInplaceOrView kernel of an op that writes its arguments ``written``: it bumps
    their version counters, as torch's in-place ops do, so that autograd refuses a
    backward through a tensor the kernel changed after it was saved."""
    after = torch._C._after_ADInplaceOrView_keyset
    increment_version = torch.autograd.graph.increment_version

    def inplace_or_view(keyset, *args):
        for i in written:
            if args[i] is not None:
                increment_version(args[i])
        return op.redispatch(keyset & after, *args)

    return inplace_or_view


def torch_op(kernel):
    """``torch.ops.tilejit.<name>.default``, the OpOverload of ``kernel``."""
    return definition(kernel)


def register_autograd(kernel, backward, setup_context=None) -> None:
    """``torch.library.register_autograd`` for the kernel's op (see
    ``JITKernel.register_autograd``)."""
    op = definition(kernel)
    with _lock:
        torch.library.register_autograd(op, backward, setup_context=setup_context,
                                        lib=_library)


def has_backward(kernel) -> bool:
    """Whether the kernel's op has an autograd kernel: a backward registered by tilejit or
    directly with ``torch.library.register_autograd``."""
    name = op_name(kernel)
    return name in _ops and torch._C._dispatch_has_kernel_for_dispatch_key(
        f"{NAMESPACE}::{name}", "Autograd")


# ---- Calls ------------------------------------------------------------------------------


def claimed_call(kernel, args: tuple, stream):
    """A call the core handed back to torch (``tj_claim``): it runs as the op, so that
    autograd records it or a tracer's tensors reach the fake implementation. Without a
    registered backward, a call autograd would have to differentiate raises instead
    of returning outputs that silently carry no gradient."""
    if stream is not None:
        raise ValueError(f"{kernel.name}: stream= cannot be given to a call that torch runs "
                         "as an op (a tensor requires grad, or a tracer made it); make the "
                         "stream current instead: with torch.cuda.stream(s): ...")
    if torch.is_grad_enabled() and not has_backward(kernel):
        names = [n for i, n in enumerate(kernel._sig.names) if i not in set(kernel.out_idx)]
        for position, value in enumerate(args):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                raise RuntimeError(
                    f"{kernel.name}: argument {position} '{names[position]}' requires grad, "
                    "but no backward is registered for this kernel, so its outputs would "
                    "carry no gradient. Register one with kernel.register_autograd(backward), "
                    "or call the kernel under torch.no_grad() or on detached tensors")
    return _eager_result(torch_op(kernel)(*args))


@_constant_at_trace_time
def _traced_op_name(kernel) -> str:
    """The op name, computed (and the op registered) while Dynamo traces, outside the
    graph: Dynamo calls this at trace time and keeps the result as a constant."""
    definition(kernel)
    _define_alive(kernel)
    return op_name(kernel)


def _define_alive(kernel) -> None:
    """Registers the op of every kernel alive. A graph torch.compile loads from its caches
    is not traced again: an op that only a registered backward calls (whose kernel
    tracing would have met) must already exist when the graph runs."""
    for other in list(type(kernel)._alive):
        if op_name(other) not in _ops:
            try:
                definition(other)
            except (TypeError, ValueError, RuntimeError):
                pass  # not expressible as an op (a T.Pointer): it says so if ever traced


def traced_call(kernel, *args, **keywords):
    """What ``torch.compile`` traces for ``kernel(*args, **keywords)``: the kernel's op.
    Dynamo inlines it in place of the kernel's ``__call__`` (``tilejit.backends.
    trace_calls_with``, below)."""
    args, stream = kernel._positional(args, keywords)
    return call_op(_traced_op_name(kernel), *args, stream=stream)


def call_op(name: str, *args, **keywords):
    """The op named ``name`` called as a kernel is: several outputs come back as a list.
    The op runs on torch's current stream, which is what CUDA graphs capture."""
    for key, value in keywords.items():
        if key != "stream":
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
        if value is not None:
            raise ValueError(f"{name}: stream= is not supported inside torch.compile; the op "
                             "runs on torch's current stream (with torch.cuda.stream(s): ...)")
    return _eager_result(getattr(getattr(torch.ops, NAMESPACE), name).default(*args))


def _eager_result(result):
    return list(result) if isinstance(result, tuple) else result


# ---- @tilejit.jit under torch.compile ------------------------------------------------


@_constant_at_trace_time
def _jit_op_name(function, *args, **kwargs) -> str:
    """Compiles (or finds) the kernel a jit factory call makes and registers its op, at
    trace time, outside the graph."""
    return _traced_op_name(function(*args, **kwargs))


def traced_jit_call(function, *args, **kwargs):
    """What ``torch.compile`` traces for ``factory(*args, **kwargs)`` of a
    ``@tilejit.jit`` function: the kernel it returns, as a callable of its op."""
    return functools.partial(call_op, _jit_op_name(function, *args, **kwargs))


@_constant_at_trace_time
def _layout_entry(function, *args, **kwargs) -> tuple:
    """``(op name, order)`` of the kernel a ``jit(layout=...)`` call runs, specialised
    and registered at trace time from the tensors' example values (Dynamo hands this
    function real tensors), outside the graph."""
    kernel, order = function.entry_for(*args, **kwargs)
    return _traced_op_name(kernel), order


def traced_layout_call(function, *args, **kwargs):
    """What ``torch.compile`` traces for a call of a ``jit(layout=...)`` function: its
    kernel's op on the tensor arguments, in the kernel's order. The layout the kernel was
    specialised for is not guarded: a later call whose layout the kernel does not accept
    fails its validation (ValueError), as a direct call of that kernel would."""
    stream = None if function._takes_stream else kwargs.pop("stream", None)
    name, order = _layout_entry(function, *args, **kwargs)
    tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
    return call_op(name, *[tensors[j] for j in order], stream=stream)


backends.trace_calls_with(traced_call)
