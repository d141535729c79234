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
see ``tilejit.runtime.backends.kernel_class``). Dynamo traces the kernel's Python-level
``__call__`` as ``dynamo.traced_call``, which emits the op. The core hands back the eager calls
torch must see (``claimed_call``: a tensor requires grad while grad mode is on, or a tensor
a tracer made) and they run as the op, so autograd records them.

>>> kernel.torch_op                      # registers tilejit::vec_add_<hash> on first use
tilejit.vec_add_1d4c...default
>>> torch.compile(lambda a, b: kernel(a, b), fullgraph=True)(a, b)
"""

from __future__ import annotations

import threading

import torch

from ...builder.torch_schema import (
    NAMESPACE,
    implementable_in_c,
    kernel_name_of,
    schema,
)
from ...runtime import frameworks
from . import autograd, fake, inductor, native_op
from .probes import FORWARD_LEVEL, IDLE_LEVEL
from .record import existing, record, schema_inputs
from .results import kernel_result, op_result, outputs_of

_lock = threading.RLock()
_library = None  # the torch.library.Library fragment of the namespace, made on first use


def implementation(kernel):
    """The op's real implementation: the kernel itself, through a call plan whose calls
    torch never claims back (``kernel._unclaimed``: the op is what a claimed call runs,
    so handing it back again would recurse), called by the dispatcher with no Python
    frame in between on plain tensors. It passes no stream, so a CUDA kernel launches
    on torch's current stream, the one a CUDA graph capture records. A kernel whose
    outputs may not be torch's (no required tensor input to allocate them like) gets
    them converted."""
    entry = kernel._unclaimed
    if implementable_in_c(kernel.artifact):  # outputs allocated like a tensor input: torch's
        return entry

    def impl(*args):
        return op_result([_as_tensor(out) for out in outputs_of(entry(*args))])

    return impl


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
    name = kernel.artifact.op_name
    rec = record(name)  # the op's one record: its OpOverload once registered
    found = rec.op
    if found is not None:
        return found
    with _lock:
        found = rec.op
        if found is None:
            text, _ = schema(kernel.artifact)
            if _library is None:
                _library = torch.library.Library(NAMESPACE, "FRAGMENT")
            # An export's torch_op.so loaded first has defined the op and registered its
            # backend kernels (the same kernel: its name carries the kernel's hash).
            loaded = _loaded_op(kernel, name, text)
            if loaded is None:
                _library.define(name + text)
            _library.impl(name, implementation(kernel), "CompositeExplicitAutograd")
            torch.library.register_fake(
                f"{NAMESPACE}::{name}",
                # Inductor, if loaded, gets its way to the kernel before a graph it cached
                # runs: every trace meets the op's fake implementation.
                fake.fake(kernel, traced=inductor.inductor_loaded), lib=_library)
            found = getattr(getattr(torch.ops, NAMESPACE), name).default
            written = [i for i, arg in enumerate(found._schema.arguments)
                       if arg.alias_info is not None and arg.alias_info.is_write]
            python_autograd = autograd.autograd_kernel(kernel, found, name)
            in_c = loaded is None and native_op.register(kernel, found, name, NAMESPACE,
                                                         bool(written))
            if not in_c or not native_op.autograd_in_c(bool(written)):
                _library.impl(name, python_autograd, "Autograd", with_keyset=True)
            else:  # tracers' Python dispatcher takes this one (native_op.autograd_in_c)
                found.py_impl(torch._C.DispatchKey.Autograd)(
                    autograd.fallback_kernel(kernel, found, name))
            if written:
                _library.impl(name, _versions_bumped(found, written), "ADInplaceOrView",
                              with_keyset=True)
            rec.defined(found)
            inductor.offer(kernel, found, name, bool(written))
    return found


def _loaded_op(kernel, name: str, text: str):
    """The op ``name`` as an export's ``torch_op.so`` registered it before this process
    asked for it, or None when no such op is registered. Its schema must be this
    kernel's (``text``)."""
    try:
        loaded = getattr(getattr(torch.ops, NAMESPACE), name).default
    except (AttributeError, RuntimeError):
        return None
    expected = f"{NAMESPACE}::{name}{text}"
    if str(loaded._schema) != str(torch._C.parse_schema(expected)):
        raise RuntimeError(f"{kernel.name}: the torch op {NAMESPACE}::{name} is registered "
                           f"already, with the schema {loaded._schema}; this kernel's is "
                           f"{expected}")
    return loaded


def is_defined(kernel) -> bool:
    """Whether the op of ``kernel`` is registered already."""
    rec = existing(kernel.artifact.op_name)
    return rec is not None and rec.op is not None


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
        name = kernel.artifact.op_name
        autograd.set_backward(name, backward, setup_context)
        for claiming in list(record(name).claiming):
            _take_claims(claiming)  # now with the backward it may record with


def has_backward(kernel) -> bool:
    """Whether a backward is registered for the kernel (on any of its backends)."""
    return autograd.has_backward_named(kernel.artifact.op_name)


# ---- Calls ------------------------------------------------------------------------------


def claimed_call(kernel, args: tuple, stream):
    """A call the core handed back to torch (``tj_claim``): it runs as the op, so that
    autograd records it (or refuses it, ``_autograd_kernel``) and a tracer's tensors
    reach the fake implementation. A call with data (a tensor requiring grad) was
    validated by the core first, with the same rules and messages as any call; its
    scalars reach the op as the schema's Python types, converted by tilejit's rules."""
    if stream is not None:
        autograd.refuse(kernel.name, [], args, autograd.STREAM)
    rec = record(kernel.artifact.op_name)
    claimed = rec.claimed
    if claimed is None:
        with _lock:
            claimed = rec.claimed
            if claimed is None:
                claimed = rec.claimed_by(_recorder(kernel, _as_op))
    if kernel not in rec.claiming and "_call_plan" in kernel.__dict__:
        with _lock:
            if kernel not in rec.claiming:
                rec.claims_handed(kernel)
                _take_claims(kernel)
    return claimed(kernel, args, None)


def _take_claims(kernel) -> None:
    """With the fast paths on, the core hands the kernel's claimed calls to a recorder
    at once. For a kernel whose inputs are all buffers and whose op does not write
    them, as soon as an argument requires grad (``claim_at_once``): a call it records
    is validated by the kernel's own run inside the Function's forward, with the
    messages of any call, and one it does not goes to the kernel's validating plan
    (``JITKernel._validated``), which hands it to ``_claimed_call`` once validated.
    Otherwise (scalars are converted to the schema's types, which only a validated
    call may be) after the core has validated it; a call it does not record then goes
    on to ``_claimed_call``."""
    name = kernel.artifact.op_name
    rec = record(name)
    if rec.base_apply is None:
        return
    plain_apply = rec.plain_apply
    if plain_apply is None or not _buffers_only(kernel):
        kernel._hand_claims_to(_recorder(kernel, type(kernel)._claimed_call))
        return
    validated = kernel._validated

    def otherwise(kernel_object, args: tuple, stream):
        return validated(*args) if stream is None else validated(*args, stream=stream)

    # The core's record gate (tj_host_plan.record) takes what autograd.decide calls
    # RECORD itself: plain tensors, none a functorch wrapper, outside inference mode,
    # functorch's transforms and forward-AD levels, a backward registered (grad mode is
    # on: the core claimed the call for a tensor that requires grad).
    # The thread's and the tensors' questions are answered in place where torch's
    # key sets can be read (native_op.plain_objects), the functions asked otherwise.
    gate = None
    adapter = frameworks.adapter_named("torch")
    scope, probe = adapter.forward_ad_scope(), adapter.grad_probe()
    if (scope is not None and rec.backward is not None
            and kernel._core_kernel.num_outputs > 0):
        gate = (plain_apply, (torch.Tensor, torch.nn.Parameter),
                autograd.is_wrapped, (torch.is_inference_mode_enabled,
                                      torch._C._are_functorch_transforms_active),
                (scope, FORWARD_LEVEL, IDLE_LEVEL),
                native_op.plain_objects(probe[0]) if probe is not None else None)
    kernel._hand_claims_to(_recorder(kernel, otherwise, at_once=True), at_once=True,
                           record=gate)


def _as_op(kernel, args: tuple, stream):
    """A claimed call autograd does not record: the op, where a tracer's tensors reach
    the fake implementation."""
    return kernel_result(torch_op(kernel)(*_schema_args(kernel, args)))


def _recorder(kernel, otherwise, *, at_once: bool = False):
    """``run(kernel, args, stream)``: a claimed call of ``kernel`` that autograd records
    (``autograd.decide``), else ``otherwise(kernel, args, stream)``. Made once per op for
    `claimed_call` (``otherwise``: the op), and, with the fast path on, for the kernel's
    call plan (``_take_claims``), whose hand-over then reaches it with no frame in
    between. Recorded here, above the dispatcher, where torch.func's transforms see the
    autograd.Function (they cannot from inside an op's Autograd kernel): a ``RECORD``
    call straight through the C apply of the op's Function (``plain_apply``; for an op
    that writes an argument ``base_apply``), any other through its ``apply``.
    ``at_once``: the call has not been validated, so only a ``RECORD`` call of torch
    tensors is recorded here (the kernel validates it in the forward); every other call
    is ``otherwise``'s."""
    rec = record(kernel.artifact.op_name)
    kinds = autograd.schema_kinds(kernel)
    buffers_only = all(kind is None for kind in kinds)
    decide, recorded, RECORD = autograd.decide, autograd.RECORDED, autograd.RECORD

    def run(kernel_object, args: tuple, stream):
        registered = rec.backward
        verdict = decide(args, kinds, registered is not None, stream)
        if verdict is RECORD:
            plain_apply = rec.plain_apply
            if plain_apply is not None:
                if buffers_only:
                    return kernel_result(plain_apply(*args))
                return kernel_result(plain_apply(*_schema_args(kernel_object, args)))
        if at_once or verdict not in recorded:
            return otherwise(kernel_object, args, stream)
        # The backward's setup_context sees the inputs as the op's schema takes them.
        return kernel_result(rec.apply(*_schema_args(kernel_object, args), None))

    return run


def _buffers_only(kernel) -> bool:
    """Whether every input of the kernel is a buffer: a call on torch tensors (and None)
    then already has the op schema's types."""
    return all(kind is None for kind, _ in schema_inputs(kernel))


def _schema_args(kernel, args: tuple) -> tuple:
    """``args`` as the op's schema takes them. A scalar becomes a bool, an int (SymInt)
    or a float, read as the core reads it (``__index__``, ``__float__``, truth): the core
    has validated it, or refuses it when the op runs the kernel. A uint64 value of 2**63
    or more, which torch cannot pass (its integers are int64), is refused naming the
    kernel and the argument. A tensor of another framework beside torch's (a NumPy
    array, a ``tilejit.Array``) becomes a torch tensor over the same memory
    (``torch.from_dlpack``), so that autograd can take the call."""
    out = list(args)
    for position, (kind, name), value in zip(range(len(args)), schema_inputs(kernel), args):
        if kind is None:  # a buffer
            if value is not None and not isinstance(value, torch.Tensor):
                out[position] = _as_torch(f"{kernel.name}: argument {position} '{name}'",
                                          value)
            continue
        if isinstance(value, torch.SymInt | torch.SymFloat):
            continue
        try:
            out[position] = kind(value)
        except (TypeError, ValueError, OverflowError):
            continue  # left as it is: the kernel refuses it with its own message
        if isinstance(out[position], int) and not -2**63 <= out[position] < 2**63:
            raise ValueError(
                f"{kernel.name}: argument {position} '{name}': {out[position]} does not fit "
                "int64, the integer type of torch ops, so this call cannot run through "
                "autograd; pass it under torch.no_grad() or with detached tensors")
    return tuple(out)


def _as_torch(label: str, value):
    """A torch tensor over ``value``'s memory, for a call torch runs as an op."""
    try:
        return torch.from_dlpack(value)
    except Exception as exc:
        raise TypeError(f"{label}: a call that torch runs as an op (a tensor requires grad) "
                        f"takes torch tensors; got {type(value).__name__}, which "
                        f"torch.from_dlpack cannot read ({exc})") from exc


def call_op(name: str, /, *args, **keywords):
    """The op named ``name`` called as a kernel is: several outputs come back as a list.
    The op runs on torch's current stream, which is what CUDA graphs capture."""
    label = kernel_name_of(name)
    for key, value in keywords.items():
        if key != "stream":
            raise TypeError(f"{label}() got an unexpected keyword argument '{key}'")
        if value is not None:
            raise ValueError(f"{label}: stream= is not supported inside torch.compile; the "
                             "op runs on torch's current stream (with torch.cuda.stream(s): "
                             "...)")
    return kernel_result(getattr(getattr(torch.ops, NAMESPACE), name).default(*args))
