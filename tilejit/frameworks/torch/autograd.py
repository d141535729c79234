"""Autograd for the kernels' torch ops: the op's Autograd kernel, the backward a kernel
registers (``kernel.register_autograd``), and the refusals (no backward, forward-mode
tangents) that name the kernel and the argument."""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from ...runtime import fast_paths
from ...runtime.fast_paths import FAST_PATHS
from .probes import APPLY, FORWARD_LEVEL, IDLE_LEVEL, apply_probe
from .record import OpRecord, existing, record, schema_inputs
from .results import as_op_result

_BELOW = "below autograd"  # forward's keyset from `fallback_kernel`: the op, below autograd


# Outside functorch's transforms a recorded call goes straight to the C apply of the op's
# Function (`_appliers`), whose forward then takes ctx (`_Conventions`): no signature bound.
# TILEJIT_FAST_PATHS=0: the Function's own ``apply``.
_transforms_active = torch._C._are_functorch_transforms_active
# The tensor types a recorded call runs the kernel on itself. A call on any other (a
# subclass: the fake tensors torch.export and make_fx trace with, a tensor subclass with
# its own __torch_dispatch__) is the op, which they see.
PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))
try:  # what Function.apply calls before the C apply (torch.autograd.function)
    from torch._functorch.utils import unwrap_dead_wrappers as _unwrap_dead_wrappers
except ImportError:  # a torch without it does no unwrapping there either
    def _unwrap_dead_wrappers(args: tuple) -> tuple:
        return args
is_wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor",
                     lambda tensor: True)  # without it: always unwrap, as Function.apply


# ---- Record this call? ---------------------------------------------------------------

# What `decide` answers. Not recorded:
RUN = "run"  # (exact=True only) a plain call, which the op's C autograd kernel runs itself
NOT_RECORDED = "not recorded"  # it runs below autograd (or the kernel refuses it)
STREAM = "stream"  # refused: stream= given to a call torch runs as an op
TANGENT = "tangent"  # refused: an input carries a forward-mode tangent
NO_BACKWARD = "no backward"  # refused: an input requires grad, no backward registered
# Recorded, through the op's one Function:
RECORD = "record"  # plain: the kernel itself in the forward, no route (the core's gate)
ROUTE = "route"  # through ``OpRecord.apply``, its route riding along as a last input
RECORDED = frozenset((RECORD, ROUTE))


def decide(args: tuple, kinds: tuple, has_backward: bool, stream=None, *,
           exact: bool = False) -> str:
    """What autograd does with a call of an op whose inputs are ``kinds`` (None for a
    buffer, else a scalar's conversion: ``record.schema_inputs``) on ``args``: the one
    answer to "record this call?", which every Python path asks and the C fast paths are
    tested against (``tests/test_torch_record.py``):

    - ``NOT_RECORDED`` for a call of another count (the kernel refuses it) or with grad
      mode off, in inference mode, or with no tensor that requires grad; with ``exact``,
      ``RUN`` for such a call the op's C autograd kernel runs itself (``plain_call``), or
      in inference mode, which skips autograd kernels;
    - ``STREAM`` with a stream, ``TANGENT`` when an input carries a forward-mode tangent,
      ``NO_BACKWARD`` when one requires grad and no backward is registered;
    - ``RECORD`` for a plain call (the core's record gate, ``tj_host_plan.record``): no
      functorch transform or forward-AD level, each buffer None or a ``PLAIN_TENSORS``
      tensor that is no functorch wrapper, no scalar a tensor;
    - ``ROUTE`` for any other call autograd records.
    """
    if len(args) != len(kinds):
        return NOT_RECORDED
    if stream is not None:
        return STREAM
    idle = tangents_idle()
    if not idle and tangent_at(args) is not None:
        return TANGENT
    if requiring_grad(args) is None:
        # Inference mode skips autograd kernels: the backend kernel runs the call.
        return (RUN if exact and (torch.is_inference_mode_enabled() or plain_call(args))
                else NOT_RECORDED)
    if not has_backward:
        return NO_BACKWARD
    if not idle or _transforms_active():
        return ROUTE
    for kind, value in zip(kinds, args):
        if kind is None:
            if value is not None and (type(value) not in PLAIN_TENSORS or is_wrapped(value)):
                return ROUTE
        elif isinstance(value, torch.Tensor):
            return ROUTE
    return RECORD


_plain_state: list = []  # [torch's default included keys, {device type: plain key set}]


def plain_call(args: tuple) -> bool:
    """Whether the op's C autograd kernel may run the call itself: the thread includes
    no dispatch key beyond torch's defaults (no dispatch mode, tracer, transform or
    inference mode), and each tensor has a plain dense tensor's key set and, with an
    autograd record, neither grad mode on nor a tangent (``tj_torch_plain``)."""
    if not _plain_state:
        from ...runtime.fast_paths import in_fresh_thread

        _plain_state.extend(in_fresh_thread(lambda: (
            torch._C._dispatch_tls_local_include_set().raw_repr(),
            {"cpu": torch._C._dispatch_keys(torch.ones(1)).raw_repr()})))
    default, plain = _plain_state
    if torch._C._dispatch_tls_local_include_set().raw_repr() != default:
        return False
    grad = torch.is_grad_enabled()
    for value in args:
        if not isinstance(value, torch.Tensor):
            continue
        if type(value) not in PLAIN_TENSORS:  # its __torch_function__ runs on the way
            return False
        keys = torch._C._dispatch_keys(value).raw_repr()
        if keys != plain.get(value.device.type):
            if value.device.type != "cuda" or "cuda" in plain:
                return False
            plain["cuda"] = torch._C._dispatch_keys(torch.ones(1, device="cuda")).raw_repr()
            if keys != plain["cuda"]:
                return False
        if value.requires_grad and (grad or _tangent_of(value) is not None):
            return False
    return True


def _tangent_of(value):
    return forward_ad.unpack_dual(value).tangent


def refuse(label: str, names: list, args: tuple, verdict: str) -> None:
    """Raises the refusal ``verdict`` names (``STREAM``, ``TANGENT``, ``NO_BACKWARD``),
    naming the kernel and the argument; nothing for the others."""
    if verdict is STREAM:
        raise ValueError(f"{label}: stream= cannot be given to a call that torch runs "
                         "as an op (a tensor requires grad, or a tracer made it); make the "
                         "stream current instead: with torch.cuda.stream(s): ...")
    if verdict is TANGENT:
        position = tangent_at(args)
        raise RuntimeError(
            f"{label}: argument {position} '{names[position]}' carries a forward-mode "
            "AD tangent, but tilejit kernels have no forward derivative (only a backward, "
            "kernel.register_autograd); compute the tangent with reverse mode "
            "(torch.func.jacrev / torch.autograd.grad), or pass the primal "
            "(forward_ad.unpack_dual(x).primal)")
    if verdict is NO_BACKWARD:
        position = requiring_grad(args)
        raise RuntimeError(_no_backward(label, position, names[position]))


def input_names(kernel) -> list[str]:
    return list(kernel.artifact.signature.input_names)


def autograd_kernel(kernel, op, name: str):
    """The op's Autograd kernel, the same for every call of it (eager, claimed by the
    core, or traced by torch.compile, whose AOT autograd runs it on fake tensors), as
    ``decide`` says:

    - a forward-mode AD tangent on an input is refused (a tilejit kernel has no
      forward derivative), rather than silently dropped;
    - with grad mode on and an input requiring grad, the call is recorded with the
      backward registered for the kernel (``register_autograd``), or refused without
      one, naming the kernel and the argument: never outputs silently without
      gradient;
    - else it runs below autograd.

    Made in two steps, each kept in the op's record: how the op runs below autograd
    (``_runners``) and the op's one ``autograd.Function`` with the ways calls reach it
    (``_recording_function``, ``_appliers``).
    """
    rec = record(name)
    kinds = schema_kinds(kernel)
    count, label, names = len(kinds), kernel.name, input_names(kernel)
    run, run_below = _runners(op)
    Recorded = _recording_function(kernel, op, rec, run, run_below)

    def recorded(args) -> bool:
        verdict = decide(args, kinds, rec.backward is not None)
        if verdict in RECORDED:
            return True
        # torch.export (and AOTInductor, which exports) captures the op as it does a
        # torch custom op without autograd: a module's parameters require grad there.
        if verdict is not NO_BACKWARD or not torch.compiler.is_exporting():
            refuse(label, names, args, verdict)
        return False

    def autograd_kernel(keyset, *args):
        if len(args) < count:
            args = _padded(args, count)
        return Recorded.apply(*args, keyset) if recorded(args) else run(keyset, args)

    def without_keyset(*args):
        # The same, for the op's C autograd kernel (native_op), which has no keyset to
        # hand over: below autograd is where grad mode off and the guard send the op.
        if len(args) < count:
            args = _padded(args, count)
        return rec.apply(*args, _BELOW) if recorded(args) else run_below(args)

    _appliers(kernel, op, rec, Recorded, without_keyset)
    return autograd_kernel


def schema_kinds(kernel) -> tuple:
    """Each input's conversion to the op's schema: None for a buffer (``decide``)."""
    return tuple(kind for kind, _ in schema_inputs(kernel))


def _runners(op):
    """``(run(keyset, args), run_below(args))``: the op below autograd, with the
    dispatcher's keyset, or without one to hand over."""
    after = torch._C._after_autograd_keyset
    below = torch._C._AutoDispatchBelowAutograd

    def run(keyset, args):
        with below():
            return op.redispatch(keyset & after, *args)

    def run_below(args):
        with below():
            return op(*args)

    return run, run_below


def _writes_no_argument(op) -> bool:
    """Whether the op writes none of its arguments: then a recorded call runs the kernel
    itself, as the op would; one that writes goes through the dispatcher, which bumps
    the arguments' version counters."""
    return not any(arg.alias_info is not None and arg.alias_info.is_write
                   for arg in op._schema.arguments)


class _Conventions(type(torch.autograd.Function)):
    """The metaclass of the ops' Functions: what torch reads as a Function's
    ``setup_context`` follows functorch. Inside a transform it is the Function's own
    (``_setup``), so the transform calls ``forward(*inputs)`` and then it, as torch.func
    requires; outside, torch's default, so the C apply calls ``forward(ctx, *inputs)``,
    which runs the setup itself: torch from 2.14 binds the forward's signature
    (``inspect``) on every apply of a Function that has a ``setup_context``, tens of
    microseconds a call, which this form skips. The forward takes either form."""

    def _convention(cls):
        return cls._setup if _transforms_active() else _DEFAULT_SETUP

    setup_context = property(_convention)


_DEFAULT_SETUP = torch.autograd.Function.setup_context
_Ctx = torch.autograd.function.FunctionCtx


def _recording_function(kernel, op, rec: OpRecord, run, run_below):
    """The op's one ``autograd.Function`` (``_Conventions``: its forward takes ``ctx``
    outside functorch's transforms, and has its ``setup_context`` apart inside them),
    whose C apply (``_FunctionBase.apply``) calls outside them. A call reaches it with
    the kernel's inputs alone (``RECORD``: plain tensors, an op that writes none: the
    forward runs the kernel) or with its route riding along as a last input that is no
    input of the kernel (the user's setup_context and backward never see it): the
    dispatcher's keyset (from the op's Autograd kernel: below autograd with it),
    ``_BELOW`` (the C autograd kernel's calls: the op below autograd) or None (from
    Python: the kernel, unclaimed, on plain tensors outside functorch's transforms; else
    the op, which grad mode off sends below)."""
    direct = _writes_no_argument(op)
    unclaimed = kernel._unclaimed
    count = len(input_names(kernel))
    tensor = torch.Tensor

    def forward(*args):
        # Outside a transform (the C apply): forward(ctx, *inputs), the setup run here.
        ctx = args[0] if args and isinstance(args[0], _Ctx) else None
        if ctx is not None:
            args = args[1:]
        if len(args) == count:  # RECORD: the kernel itself, several outputs a tuple
            output = unclaimed(*args)
            if output.__class__ is list:
                output = tuple(output)
        elif args[-1] is _BELOW:
            output = run_below(args[:-1])
        elif args[-1] is not None:
            output = run(args[-1], args[:-1])
        else:
            output = _unrouted(args[:-1])
        if ctx is not None and rec.backward[1] is not None:
            setup_context(ctx, args, output)
        return output

    def _unrouted(args):
        if direct and not _transforms_active():
            for value in args:
                if isinstance(value, tensor) and type(value) not in PLAIN_TENSORS:
                    return op(*args)
            return as_op_result(unclaimed(*args))
        return op(*args)

    def setup_context(ctx, inputs, output):
        # The registered setup_context sees the kernel's inputs, and needs_input_grad one
        # entry each: a route riding along is trimmed off, as in backward.
        _, setup = rec.backward
        if setup is None:
            return
        if len(inputs) == count:
            setup(ctx, inputs, output)
            return
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:count]
        try:
            setup(ctx, inputs[:count], output)
        finally:
            ctx.needs_input_grad = needs

    def backward(ctx, *grads):
        registered, _ = rec.backward
        needs = ctx.needs_input_grad
        if len(needs) == count:
            return registered(ctx, *grads)
        ctx.needs_input_grad = needs[:count]
        try:
            result = registered(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*(result if isinstance(result, tuple) else (result,)), None)

    # Named after the kernel: its outputs' grad_fn is <kernel>Backward. Under vmap,
    # torch.func batches it by running forward and backward per slice.
    return _Conventions(kernel.name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "_setup": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True})


def _appliers(kernel, op, rec: OpRecord, Recorded, keyless) -> None:
    """How calls reach the op's Function, kept in its record: ``apply`` for every
    recorded call, and with the fast paths the Function's C apply, which binds no
    signature (``base_apply`` outside functorch's transforms; ``plain_apply``, the same,
    for ``RECORD`` calls of an op that writes no argument). Without them,
    ``Recorded.apply``."""
    if not apply_checked():
        rec.recording(Recorded, Recorded.apply, None, None, keyless)
        return
    tensor = torch.Tensor
    base_apply = super(torch.autograd.Function, Recorded).apply

    def apply(*args):
        if _transforms_active():
            return Recorded.apply(*args)
        # As Function.apply does there: a tensor left by a finished transform is
        # unwrapped first (asked per tensor: the unwrapping copies the arguments).
        for arg in args:
            if isinstance(arg, tensor) and is_wrapped(arg):
                return base_apply(*_unwrap_dead_wrappers(args))
        return base_apply(*args)

    plain_apply = base_apply if _writes_no_argument(op) else None
    rec.recording(Recorded, apply, base_apply, plain_apply, keyless)


def _padded(args: tuple, count: int) -> tuple:
    """``args`` with the trailing optional inputs torch's dispatcher left out put back as
    None: a Python kernel receives a call's arguments without the trailing ones equal to
    their schema default (``k.torch_op(x, None)`` arrives as ``(x,)`` under AOT dispatch
    and ``opcheck``), while ``setup_context`` and the backward must see every input."""
    return (*args, *(None,) * (count - len(args)))


_apply_state: list = []  # [whether the C apply fast path is on], once decided


def apply_checked() -> bool:
    """Whether recorded calls take the C apply of a Function whose forward takes ctx
    (``probes.apply_probe``, decided once; off with ``TILEJIT_FAST_PATHS=0``)."""
    if not _apply_state:
        if FAST_PATHS:
            _apply_state.append(apply_probe(torch, _Conventions))
        else:
            _apply_state.append(fast_paths.decided(
                APPLY, False, "TILEJIT_FAST_PATHS=0: autograd.Function.apply"))
    return _apply_state[0]


def fallback_kernel(kernel, op, name: str):
    """The op's autograd kernel without the dispatcher's keyset (``autograd_kernel``'s
    meaning), for the C autograd kernel to hand the calls it cannot run itself to."""
    rec = record(name)
    if rec.keyless is None:
        autograd_kernel(kernel, op, name)
    return rec.keyless


def requiring_grad(args: tuple) -> int | None:
    """The position of the first tensor of ``args`` autograd must record (it requires
    grad while grad mode is on), or None. Inference mode records nothing, grad mode on or
    not, as torch's own ops do there."""
    if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
        for position, value in enumerate(args):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                return position
    return None


def _no_backward(kernel_name: str, position: int, name: str) -> str:
    return (f"{kernel_name}: argument {position} '{name}' requires grad, but no backward is "
            "registered for this kernel, so its outputs would carry no gradient. Register one "
            "with kernel.register_autograd(backward), or call the kernel under "
            "torch.no_grad() or on detached tensors")


def tangents_idle() -> bool:
    """Whether no forward-AD level is open (the fast check of ``refuse_tangents``: no
    input can carry a tangent then); False when it cannot be told this way."""
    return FAST_PATHS and getattr(forward_ad, FORWARD_LEVEL, None) == IDLE_LEVEL


def tangent_at(args: tuple) -> int | None:
    """The position of the first input carrying a forward-mode AD tangent
    (``torch.autograd.forward_ad``, ``torch.func.jvp``), or None."""
    # The fast path: forward_ad's own record of the current level, -1 outside any
    # (checked once per process by tilejit.runtime.host); else every input is asked.
    if tangents_idle():
        return None
    for position, value in enumerate(args):
        if isinstance(value, torch.Tensor) and _tangent_of(value) is not None:
            return position
    return None


def set_backward(name: str, backward, setup_context) -> None:
    """Records the backward of the op ``name`` (``register_autograd``)."""
    record(name).registered(backward, setup_context)


def has_backward_named(name: str) -> bool:
    rec = existing(name)
    return rec is not None and rec.backward is not None
