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
import keyword
import threading

import torch
from torch.autograd import forward_ad

from ...builder.cache import artifact_key
from ...language.lang import Buffer, Expr, PointerParam, Scalar, Symbol
from ...runtime import backends
from ...runtime.fast_paths import FAST_PATHS
from ...runtime.host import FORWARD_LEVEL, IDLE_LEVEL

NAMESPACE = "tilejit"

_lock = threading.RLock()
_ops: dict = {}  # op name -> its OpOverload, once registered
_library = None  # the torch.library.Library fragment of the namespace, made on first use


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


# ---- Naming ------------------------------------------------------------------------------


def op_name(kernel) -> str:
    """``<kernel name>_<16 hex digits>``: the hash covers the signature (prototype,
    lowered spec, out_idx), the target and the compiled binary's bytes, so equal kernels
    share a name in every process and different ones never do. The execution backend
    is not part of it: ``kernel.with_backend(name)`` is the same kernel, with the same
    op and the same backward."""
    name = kernel.__dict__.get("_torch_op_name")
    if name is None:
        sig = kernel._sig
        key = artifact_key(
            kind="torch_op", name=sig.name, prototype=sig.c_prototype, spec=sig.spec,
            out_idx=sig.out_idx, target=sig.target, binaries=kernel._binary_digests)
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


def bind_symbols(kernel, args) -> dict:
    """The symbols a call with inputs ``args`` (the kernel's inputs, in order) binds, by
    the core's rules (core/src/validate.c, ``check_buffer``), from sizes and strides that
    may be torch's symbolic ones: parameter by parameter, each lone-symbol extent of the
    shape binds its symbol on first sight, then each stride; the stride of a size-1 or
    empty dimension, which is never stepped over, binds a still-unbound symbol only
    loosely, and any later firm binding replaces it. A firmly bound symbol met again
    must match, as must constant extents and strides, refused with the core's words.
    ``tests/test_torch_autograd.py`` checks that this and the core agree on random
    signatures of every kind."""
    sig = kernel._sig
    params = kernel.params
    inputs = [i for i in range(len(params)) if i not in set(sig.out_idx)]
    firm: dict[Symbol, tuple] = {}  # symbol -> (value, label of the argument binding it)
    loose: dict[Symbol, object] = {}
    bound_by_scalars = {s for s in sig.symbols if s.scalar is not None}
    for position, (i, value) in enumerate(zip(inputs, args)):
        param = params[i]
        label = f"argument {position} '{sig.names[i]}'"
        if isinstance(param, Scalar) and param._symbol in bound_by_scalars:
            _bind_scalar(sig, label, firm, loose, param._symbol, value)
            continue
        if not isinstance(param, Buffer) or value is None:
            continue
        _check_tensor(sig, label, param, value)

        shape = tuple(value.shape)
        for d, (e, size) in enumerate(zip(param.shape, shape)):
            _bind_one(sig, label, firm, loose, ("shape", d, e, size))
        empty = any(size == 0 for size in shape)
        if param.strides is None:
            if not empty:
                _check_compact(sig, label, shape, tuple(value.stride()))
            continue
        for d, (e, stride) in enumerate(zip(param.strides, value.stride())):
            if empty or shape[d] == 1:  # never stepped over: binds only loosely
                if isinstance(e, Symbol) and e not in firm and e not in loose:
                    loose[e] = stride
            else:
                _bind_one(sig, label, firm, loose, ("stride", d, e, stride))
    return {**loose, **{symbol: value for symbol, (value, _) in firm.items()}}


def _bind_one(sig, label: str, firm: dict, loose: dict, dim: tuple) -> None:
    """One extent or stride ``dim`` = (what, d, declared expression, actual) of argument
    ``label``, as the core's ``check_direct`` takes it: a constant must match; a symbol is
    bound on first sight (not negative, divisible as declared), and must match after."""
    what, d, e, actual = dim
    if isinstance(e, Symbol):
        if _agrees(sig, label, firm, e, actual, lambda bound: f"{what}[{d}] == {e.name} "
                                                              f"(= {bound}, "):
            return
        if actual < 0:
            raise ValueError(f"{sig.name}: {label}: {what}[{d}] = {actual} is negative, and "
                             f"negative strides are not declared (symbol {e.name})")
        if actual % e.divisibility != 0:
            raise ValueError(f"{sig.name}: {label}: {what}[{d}] = {actual} binds {e.name}, "
                             f"which must be divisible by {e.divisibility}")
        firm[e] = (actual, label)
        loose.pop(e, None)
    elif isinstance(e, int) and actual != e:
        raise ValueError(f"{sig.name}: {label}: expected {what}[{d}] == {e}, got {actual}")


def _agrees(sig, label: str, firm: dict, symbol: Symbol, actual, expected) -> bool:
    """Whether ``symbol`` is firmly bound already; then ``actual`` must be its value, or
    the call is refused with the core's words (``expected(bound)`` says what)."""
    if symbol not in firm:
        return False
    bound, by = firm[symbol]
    if actual != bound:
        raise ValueError(f"{sig.name}: {label}: expected {expected(bound)}bound by {by}), got "
                         f"{actual}")
    return True


def _bind_scalar(sig, label: str, firm: dict, loose: dict, symbol: Symbol, value) -> None:
    """An integer scalar's value (an int or a SymInt) binding its symbol, as the core's
    ``bind_scalar`` takes it: it must agree with a value already bound, and be divisible
    as declared."""
    if _agrees(sig, label, firm, symbol, value, lambda bound: f"{symbol.name} == {bound} ("):
        return
    if value % symbol.divisibility != 0:
        raise ValueError(f"{sig.name}: {label}: value {value} binds {symbol.name}, which must "
                         f"be divisible by {symbol.divisibility}")
    firm[symbol] = (value, label)
    loose.pop(symbol, None)


def _check_compact(sig, label: str, shape: tuple, strides: tuple) -> None:
    """A buffer without declared strides takes compact row-major tensors (size-1
    dimensions may have any stride), refused with the core's words."""
    want, expected = [], 1
    for size in reversed(shape):
        want.append(expected)
        expected *= size
    want.reverse()
    if any(size != 1 and stride != w for size, stride, w in zip(shape, strides, want)):
        raise ValueError(f"{sig.name}: {label}: expected a compact row-major tensor (strides "
                         f"{_tuple(want)}), got strides {_tuple(strides)}; declare strides to "
                         "accept strided tensors")


def _tuple(values) -> str:
    return str(tuple(int(v) for v in values))


def _fake(kernel):
    """The fake implementation: outputs shaped from the symbols the inputs bind
    (``bind_symbols``), on the first tensor's device."""
    sig = kernel._sig
    params = kernel.params
    default = torch.device("cuda" if sig.target == "cuda" else "cpu")

    def fake(*args):
        values = bind_symbols(kernel, args)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), default)
        outputs = []
        for i in sig.out_idx:
            shape = [e.evaluate(values) if isinstance(e, Expr) else e for e in params[i].shape]
            outputs.append(torch.empty(shape, dtype=_torch_dtype(params[i].dtype),
                                       device=device))
        return _returned(outputs)

    return fake


def _check_tensor(sig, label: str, param: Buffer, value) -> None:
    """What the core would refuse first and a tracer can tell without data: the dtype and
    the number of dimensions, with the core's wording."""
    if value.dtype != _torch_dtype(param.dtype):
        got = str(value.dtype).removeprefix("torch.")
        raise ValueError(f"{sig.name}: {label}: expected dtype {param.dtype}, got {got}")
    if value.dim() != len(param.shape):
        raise ValueError(f"{sig.name}: {label}: expected a {len(param.shape)}-d tensor, got "
                         f"{value.dim()}-d with shape {tuple(value.shape)}")


def _returned(outputs: list):
    """Outputs as the op returns them: one tensor, a tuple of several, or None."""
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def implementation(kernel):
    """The op's real implementation: the kernel itself, through a call plan whose calls
    torch never claims back (``kernel._unclaimed``: the op is what a claimed call runs,
    so handing it back again would recurse), called by the dispatcher with no Python
    frame in between on plain tensors. It passes no stream, so a CUDA kernel launches
    on torch's current stream, the one a CUDA graph capture records. A kernel whose
    outputs may not be torch's (no required tensor input to allocate them like) gets
    them converted."""
    sig = kernel._sig
    entry = kernel._unclaimed
    if any(isinstance(p, Buffer) and not p.optional and i not in sig.out_idx
           for i, p in enumerate(kernel.params)) or not sig.out_idx:
        return entry

    def impl(*args):
        return _returned([_as_tensor(out) for out in _as_list(entry(*args))])

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
    call, where custom_op's Python aliasing checks add about 16 us to every call (see
    ``python -m tilejit bench --torch-compile``). Its autograd kernel is tilejit's
    (``_autograd_kernel``), registered with the op: with a backward
    (``register_autograd``) it records the call; without one it refuses a call autograd
    would have to differentiate, in eager mode and while torch.compile traces alike. An
    op that writes its arguments also bumps their version counters
    (``_versions_bumped``), as custom_op would.
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
            _library.impl(name, _autograd_kernel(kernel, found), "Autograd", with_keyset=True)
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


# ---- Autograd ---------------------------------------------------------------------------

_backwards: dict = {}  # op name -> (backward, setup_context), as registered
_recorded: dict = {}  # op name -> its autograd.Function (_autograd_kernel)


def _input_names(kernel) -> list[str]:
    outputs = set(kernel._sig.out_idx)
    return [n for i, n in enumerate(kernel._sig.names) if i not in outputs]


def _autograd_kernel(kernel, op):
    """The op's Autograd kernel, the same for every call of it (eager, claimed by the
    core, or traced by torch.compile, whose AOT autograd runs it on fake tensors):

    - a forward-mode AD tangent on an input is refused (a tilejit kernel has no
      forward derivative), rather than silently dropped;
    - with grad mode on and an input requiring grad, the call is recorded with the
      backward registered for the kernel (``register_autograd``), or refused without
      one, naming the kernel and the argument: never outputs silently without
      gradient;
    - else it runs below autograd.
    """
    name = op_name(kernel)
    label = kernel.name
    names = _input_names(kernel)
    after = torch._C._after_autograd_keyset
    below = torch._C._AutoDispatchBelowAutograd

    def run(keyset, args):
        with below():
            return op.redispatch(keyset & after, *args)

    # forward and setup_context apart, as torch.func's transforms require; the
    # dispatcher's keyset rides along as a last input that is no input of the kernel.

    def forward(*args):
        keyset, args = args[-1], args[:-1]
        # From the op's Autograd kernel: below autograd with its keyset; from Python
        # (claimed_call, None): the op itself, which grad mode off sends below.
        return run(keyset, args) if keyset is not None else op(*args)

    def setup_context(ctx, inputs, output):
        _, setup = _backwards[name]
        if setup is not None:
            setup(ctx, inputs[:-1], output)

    def backward(ctx, *grads):
        registered, _ = _backwards[name]
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            result = registered(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*(result if isinstance(result, tuple) else (result,)), None)

    # Named after the kernel: its outputs' grad_fn is <kernel>Backward. Under vmap,
    # torch.func batches it by running forward and backward per slice.
    Recorded = type(label, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True})
    _recorded[name] = Recorded

    def autograd_kernel(keyset, *args):
        _refuse_tangents(label, names, args)
        position = _requiring_grad(args)
        if position is None:
            return run(keyset, args)
        if name not in _backwards:
            raise RuntimeError(_no_backward(label, position, names[position]))
        return Recorded.apply(*args, keyset)

    return autograd_kernel


def _requiring_grad(args: tuple) -> int | None:
    """The position of the first tensor of ``args`` autograd must record (it requires
    grad while grad mode is on), or None."""
    if torch.is_grad_enabled():
        for position, value in enumerate(args):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                return position
    return None


def _no_backward(kernel_name: str, position: int, name: str) -> str:
    return (f"{kernel_name}: argument {position} '{name}' requires grad, but no backward is "
            "registered for this kernel, so its outputs would carry no gradient. Register one "
            "with kernel.register_autograd(backward), or call the kernel under "
            "torch.no_grad() or on detached tensors")


def _refuse_tangents(kernel_name: str, names: list, args: tuple) -> None:
    """Forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``): refused for
    an input carrying a tangent, naming the kernel and the argument."""
    # The fast path: forward_ad's own record of the current level, -1 outside any
    # (checked once per process by tilejit.host); else every input is asked.
    if FAST_PATHS and getattr(forward_ad, FORWARD_LEVEL, None) == IDLE_LEVEL:
        return
    for position, value in enumerate(args):
        if isinstance(value, torch.Tensor) and forward_ad.unpack_dual(value).tangent is not None:
            raise RuntimeError(
                f"{kernel_name}: argument {position} '{names[position]}' carries a forward-mode "
                "AD tangent, but tilejit kernels have no forward derivative (only a backward, "
                "kernel.register_autograd); compute the tangent with reverse mode "
                "(torch.func.jacrev / torch.autograd.grad), or pass the primal "
                "(forward_ad.unpack_dual(x).primal)")


def register_autograd(kernel, backward, setup_context=None) -> None:
    """Makes the kernel's op differentiable (see ``JITKernel.register_autograd``): the
    meaning of ``torch.library.register_autograd``, kept by tilejit so that it holds for
    the op of the kernel on every backend. Registering again replaces the backward."""
    if not callable(backward):
        raise TypeError(f"{kernel.name}: backward must be callable, got "
                        f"{type(backward).__name__}")
    if setup_context is not None and not callable(setup_context):
        raise TypeError(f"{kernel.name}: setup_context must be callable or None, got "
                        f"{type(setup_context).__name__}")
    definition(kernel)
    with _lock:
        _backwards[op_name(kernel)] = (backward, setup_context)


def has_backward(kernel) -> bool:
    """Whether a backward is registered for the kernel (on any of its backends)."""
    return op_name(kernel) in _backwards


# ---- Calls ------------------------------------------------------------------------------


def claimed_call(kernel, args: tuple, stream):
    """A call the core handed back to torch (``tj_claim``): it runs as the op, so that
    autograd records it (or refuses it, ``_autograd_kernel``) and a tracer's tensors
    reach the fake implementation. A call with data (a tensor requiring grad) was
    validated by the core first, with the same rules and messages as any call; its
    scalars reach the op as the schema's Python types, converted by tilejit's rules."""
    if stream is not None:
        raise ValueError(f"{kernel.name}: stream= cannot be given to a call that torch runs "
                         "as an op (a tensor requires grad, or a tracer made it); make the "
                         "stream current instead: with torch.cuda.stream(s): ...")
    op = torch_op(kernel)
    args = _schema_args(kernel, args)
    name = op_name(kernel)
    if name in _backwards and _requiring_grad(args) is not None:
        # Recorded here, above the dispatcher, where torch.func's transforms see the
        # autograd.Function (they cannot from inside an op's Autograd kernel).
        _refuse_tangents(kernel.name, _input_names(kernel), args)
        return _eager_result(_recorded[name].apply(*args, None))
    return _eager_result(op(*args))


def _schema_args(kernel, args: tuple) -> tuple:
    """``args`` as the op's schema takes them. A scalar becomes a bool, an int (SymInt)
    or a float, read as the core reads it (``__index__``, ``__float__``, truth): the core
    has validated it, or refuses it when the op runs the kernel. A uint64 value of 2**63
    or more, which torch cannot pass (its integers are int64), is refused naming the
    kernel and the argument. A tensor of another framework beside torch's (a NumPy
    array, a ``tilejit.Array``) becomes a torch tensor over the same memory
    (``torch.from_dlpack``), so that autograd can take the call."""
    import operator

    outputs = set(kernel._sig.out_idx)
    inputs = [(p, n) for i, (p, n) in enumerate(zip(kernel.params, kernel._sig.names))
              if i not in outputs]
    out = list(args)
    for position, ((param, name), value) in enumerate(zip(inputs, args)):
        label = f"{kernel.name}: argument {position} '{name}'"
        if isinstance(param, Buffer):
            if value is not None and not isinstance(value, torch.Tensor):
                out[position] = _as_torch(label, value)
            continue
        if isinstance(value, torch.SymInt | torch.SymFloat):
            continue
        try:
            if param.dtype == "bool":
                out[position] = bool(value)
            elif param.dtype.startswith("float"):
                out[position] = float(value)
            else:
                out[position] = operator.index(value)
        except (TypeError, ValueError, OverflowError):
            continue  # left as it is: the kernel refuses it with its own message
        if isinstance(out[position], int) and not -2**63 <= out[position] < 2**63:
            raise ValueError(
                f"{label}: {out[position]} does not fit int64, the integer type of torch ops, "
                "so this call cannot run through autograd; pass it under torch.no_grad() or "
                "with detached tensors")
    return tuple(out)


def _as_torch(label: str, value):
    """A torch tensor over ``value``'s memory, for a call torch runs as an op."""
    try:
        return torch.from_dlpack(value)
    except Exception as exc:
        raise TypeError(f"{label}: a call that torch runs as an op (a tensor requires grad) "
                        f"takes torch tensors; got {type(value).__name__}, which "
                        f"torch.from_dlpack cannot read ({exc})") from exc


def _registered_op_name(kernel) -> str:
    """The op name, the op registered (with every live kernel's: ``_define_alive``)."""
    definition(kernel)
    _define_alive(kernel)
    return op_name(kernel)


@_constant_at_trace_time
def _traced_op_name(key: str) -> str:
    """The op name of the kernel ``key`` names (``backends.register_traced``), computed
    and the op registered while Dynamo traces, outside the graph: Dynamo calls this at
    trace time and keeps the result as a constant."""
    return _registered_op_name(backends.traced_object(key))


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


def traced_call(kernel, /, *args, **keywords):
    """What ``torch.compile`` traces for ``kernel(*args, **keywords)``: the kernel's op.
    Dynamo inlines it in place of the kernel's ``__call__`` (``tilejit.backends.
    trace_calls_with``, below)."""
    args, stream = kernel._positional(args, keywords)
    return call_op(_traced_op_name(kernel._trace_key), *args, stream=stream)


def call_op(name: str, /, *args, **keywords):
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
def _jit_op_name(key: str, /, *args, **kwargs) -> str:
    """Compiles (or finds) the kernel a call of the jit function ``key`` names makes and
    registers its op, at trace time, outside the graph."""
    return _registered_op_name(backends.traced_object(key).kernel_for(*args, **kwargs))


def traced_jit_call(function, /, *args, **kwargs):
    """What ``torch.compile`` traces for ``factory(*args, **kwargs)`` of a
    ``@tilejit.jit`` function: the kernel it returns, as a callable of its op."""
    return functools.partial(call_op, _jit_op_name(function._trace_key, *args, **kwargs))


@_constant_at_trace_time
def _layout_entry(key: str, /, *args, **kwargs) -> tuple:
    """``(op name, order)`` of the kernel a call of the ``jit(layout=...)`` function
    ``key`` names runs, specialised and registered at trace time from the tensors'
    example values (Dynamo hands this function real tensors), outside the graph."""
    kernel, order = backends.traced_object(key).entry_for(*args, **kwargs)
    return _registered_op_name(kernel), order


def traced_layout_call(function, /, *args, **kwargs):
    """What ``torch.compile`` traces for a call of a ``jit(layout=...)`` function: its
    kernel's op on the tensor arguments, in the kernel's order. The layout the kernel was
    specialised for is not guarded: a later call whose layout the kernel does not accept
    fails its validation (ValueError), as a direct call of that kernel would."""
    stream = None if function._takes_stream else kwargs.pop("stream", None)
    name, order = _layout_entry(function._trace_key, *args, **kwargs)
    tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
    return call_op(name, *[tensors[j] for j in order], stream=stream)


backends.trace_calls_with(traced_call, torch.compiler.is_compiling)
