"""Autograd for the kernels' torch ops: the op's Autograd kernel, the backward a kernel
registers (``kernel.register_autograd``), and the refusals (no backward, forward-mode
tangents) that name the kernel and the argument."""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from ...runtime import fast_paths
from ...runtime.fast_paths import FAST_PATHS
from .probes import APPLY, FORWARD_LEVEL, IDLE_LEVEL, apply_probe
from .results import as_op_result

_BELOW = "below autograd"  # forward's keyset from `fallback_kernel`: the op, below autograd


class OpRecord:
    """Everything tilejit keeps of one torch op, in one place: an op name (a kernel's
    content) and every kernel of that content share it. Made by ``record``.

    - ``op``: its ``OpOverload``, once registered (``op.definition``);
    - ``backward``: ``(backward, setup_context)`` as registered, or None;
    - ``recorded``: the ``autograd.Function`` that records its calls (``autograd_kernel``);
    - ``apply``: ``apply(*args, None)``, how a claimed call records (the Function's own
      apply, or with the fast paths its C apply minus the signature binding);
    - ``base_apply``: ``apply(*args, None)`` for a caller that has made sure no functorch
      transform is active and no input is a functorch wrapper: the C apply (fast paths
      on; else None);
    - ``plain_apply``: ``apply(*args)`` for a caller that has also made sure every input
      is a plain tensor (``PLAIN_TENSORS``) or not a tensor: a Function that runs the
      kernel at once (`_plain_apply`); None for an op that writes an argument (its calls
      go through the dispatcher, which bumps the version counters) or without the fast
      paths;
    - ``keyless``: its autograd kernel without the dispatcher's keyset (``fallback_kernel``);
    - ``plain_forwards``: ``(plain Function, Python forward, C forward)``, for
      ``_choose_forward``.
    """

    __slots__ = ("apply", "backward", "base_apply", "keyless", "op", "plain_apply",
                 "plain_forwards", "recorded")

    def __init__(self) -> None:
        self.op = self.backward = self.recorded = self.apply = None
        self.base_apply = self.plain_apply = self.keyless = self.plain_forwards = None


_records: dict[str, OpRecord] = {}  # op name -> its record


def record(name: str) -> OpRecord:
    """The record of the op ``name``, made on first use."""
    found = _records.get(name)
    return found if found is not None else _records.setdefault(name, OpRecord())


# Outside functorch's transforms a recorded call goes straight to the C apply of a
# Function whose forward takes ctx (`_plain_apply` for plain calls, else `_single_apply`),
# which binds no signature.
# TILEJIT_FAST_PATHS=0: the op's Function's own ``apply``.
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


def input_names(kernel) -> list[str]:
    return list(kernel._sig.input_names)


def autograd_kernel(kernel, op, name: str):
    """The op's Autograd kernel, the same for every call of it (eager, claimed by the
    core, or traced by torch.compile, whose AOT autograd runs it on fake tensors):

    - a forward-mode AD tangent on an input is refused (a tilejit kernel has no
      forward derivative), rather than silently dropped;
    - with grad mode on and an input requiring grad, the call is recorded with the
      backward registered for the kernel (``register_autograd``), or refused without
      one, naming the kernel and the argument: never outputs silently without
      gradient;
    - else it runs below autograd.

    Made in three steps, each recorded in the op's record: how the op runs below
    autograd (``_runners``), the ``autograd.Function`` that records a call
    (``_recording_function``) and the ways calls reach its apply (``_appliers``); the
    kernel itself then decides per call (``_decider``).
    """
    rec = record(name)
    count = len(input_names(kernel))
    run, run_below = _runners(op)
    Recorded, forward_with_ctx, backward = _recording_function(kernel, op, rec, run, run_below)
    _appliers(kernel, op, rec, Recorded, forward_with_ctx, backward)
    recorded = _decider(kernel, rec)

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

    rec.keyless = without_keyset
    return autograd_kernel


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


def _decider(kernel, rec: OpRecord):
    """``recorded(args)``: what the Autograd kernel does with a call: tangents refused,
    then True to record it, False to run it below autograd; refused without a backward."""
    label = kernel.name
    names = input_names(kernel)

    def recorded(args) -> bool:
        refuse_tangents(label, names, args)
        position = requiring_grad(args)
        if position is None:
            return False
        if rec.backward is None:
            # torch.export (and AOTInductor, which exports) captures the op as it does a
            # torch custom op without autograd: a module's parameters require grad there.
            if torch.compiler.is_exporting():
                return False
            raise RuntimeError(_no_backward(label, position, names[position]))
        return True

    return recorded


def _writes_no_argument(op) -> bool:
    """Whether the op writes none of its arguments: then a recorded call runs the kernel
    itself, as the op would; one that writes goes through the dispatcher, which bumps
    the arguments' version counters."""
    return not any(arg.alias_info is not None and arg.alias_info.is_write
                   for arg in op._schema.arguments)


def _recording_function(kernel, op, rec: OpRecord, run, run_below):
    """``(Recorded, forward_with_ctx, backward)``: the op's ``autograd.Function``, its
    forward and setup_context apart, as torch.func's transforms require (``rec.recorded``);
    the forward taking ``ctx`` and the backward, which the fast appliers share."""
    direct = _writes_no_argument(op)
    unclaimed = kernel._unclaimed
    tensor = torch.Tensor

    def forward_with_ctx(ctx, *args):
        # The dispatcher's keyset (or how to run the op) rides along as a last input that
        # is no input of the kernel: the user's setup_context and backward never see it.
        keyset, args = args[-1], args[:-1]
        # From the op's Autograd kernel: below autograd with its keyset. From Python
        # (claimed_call, None): the kernel, unclaimed (grad mode is off in here), outside
        # functorch's transforms, on plain tensors (PLAIN_TENSORS, checked inline); else
        # the op, which grad mode off sends below.
        if keyset is _BELOW:
            output = run_below(args)
        elif keyset is not None:
            output = run(keyset, args)
        elif direct and not _transforms_active():
            for value in args:
                if isinstance(value, tensor) and type(value) not in PLAIN_TENSORS:
                    output = op(*args)
                    break
            else:
                output = as_op_result(unclaimed(*args))
        else:
            output = op(*args)
        if ctx is not None:  # the Function without setup_context (`_single_apply`)
            run_setup(ctx, args, output)
        return output

    def forward(*args):
        return forward_with_ctx(None, *args)

    def run_setup(ctx, inputs, output):
        # The registered setup_context sees the kernel's inputs, and needs_input_grad one
        # entry each: the keyset riding along as a last input is trimmed off, as in backward.
        _, setup = rec.backward
        if setup is not None:
            needs = ctx.needs_input_grad
            ctx.needs_input_grad = needs[:len(inputs)]
            try:
                setup(ctx, inputs, output)
            finally:
                ctx.needs_input_grad = needs

    def setup_context(ctx, inputs, output):
        run_setup(ctx, inputs[:-1], output)

    def backward(ctx, *grads):
        registered, _ = rec.backward
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            result = registered(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*(result if isinstance(result, tuple) else (result,)), None)

    # Named after the kernel: its outputs' grad_fn is <kernel>Backward. Under vmap,
    # torch.func batches it by running forward and backward per slice.
    rec.recorded = type(kernel.name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True})
    return rec.recorded, forward_with_ctx, backward


def _appliers(kernel, op, rec: OpRecord, Recorded, forward_with_ctx, backward) -> None:
    """How calls reach the recording: ``rec.apply`` for every claimed call, and with the
    fast paths the layers over it, the C applies of Functions whose forward takes ``ctx``
    (``rec.base_apply`` outside functorch's transforms, ``rec.plain_apply`` for plain
    calls of an op that writes no argument). Without them, ``Recorded.apply``."""
    if not apply_checked():
        rec.apply = Recorded.apply
        return
    label = kernel.name
    tensor = torch.Tensor
    base_apply = _single_apply(label, forward_with_ctx, backward)

    def apply(*args):
        if _transforms_active():
            return Recorded.apply(*args)
        # As Function.apply does there: a tensor left by a finished transform is
        # unwrapped first (asked per tensor: the unwrapping copies the arguments).
        for arg in args:
            if isinstance(arg, tensor) and is_wrapped(arg):
                return base_apply(*_unwrap_dead_wrappers(args))
        return base_apply(*args)

    rec.base_apply = base_apply
    if _writes_no_argument(op):
        single = kernel._core_kernel.num_outputs == 1
        rec.plain_apply = _plain_apply(label, rec, kernel._unclaimed,
                                       kernel._forward if single else None)
    rec.apply = apply


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
            _apply_state.append(apply_probe(torch))
        else:
            _apply_state.append(fast_paths.decided(
                APPLY, False, "TILEJIT_FAST_PATHS=0: autograd.Function.apply"))
    return _apply_state[0]


def _single_apply(label: str, forward, backward):
    """The C apply (``_FunctionBase.apply``) of the op's other ``autograd.Function``, for
    calls outside functorch's transforms: its forward takes ``ctx`` and calls the
    registered ``setup_context`` itself, with the same inputs, output and ``ctx`` that
    torch would hand it. ``Function.apply`` binds its arguments to ``forward``'s signature
    with ``inspect.signature`` at every call (torch up to 2.13 in Python; from 2.14 in C,
    for any Function with a ``setup_context``: several microseconds a call), which a Function without
    ``setup_context`` skips. Same name (``<kernel>Backward``), same gradients; torch.func's
    transforms, which need ``setup_context`` apart, get the op's Function (``Recorded``)."""
    Single = type(label, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})
    return super(torch.autograd.Function, Single).apply


def _plain_apply(label: str, rec: OpRecord, unclaimed, forward_entry=None):
    """The C apply of the op's Function for the calls that matter most: plain tensors, no
    transform, an op that writes no argument. Its forward takes exactly the kernel's
    inputs (no keyset rides along), runs the kernel and the registered ``setup_context``;
    its backward is the registered one. Same name, same gradients as `_single_apply`'s.
    ``forward_entry`` (a kernel of one output: ``JITKernel._forward``) is the forward
    itself while no ``setup_context`` is registered: the kernel's call with ``ctx`` left
    out, no Python frame (`_choose_forward`, again at every registration)."""

    def forward(ctx, *args):
        output = as_op_result(unclaimed(*args))
        _, setup = rec.backward
        if setup is not None:
            setup(ctx, args, output)
        return output

    def backward(ctx, *grads):
        return rec.backward[0](ctx, *grads)

    Plain = type(label, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})
    rec.plain_forwards = (Plain, forward, forward_entry)
    _choose_forward(rec)
    return super(torch.autograd.Function, Plain).apply


def _choose_forward(rec: OpRecord) -> None:
    """The plain Function's forward for the op's registration: the C one without a
    ``setup_context`` (nothing else for the forward to do), else the Python one."""
    if rec.plain_forwards is None:
        return
    Plain, python_forward, c_forward = rec.plain_forwards
    setup = rec.backward[1] if rec.backward is not None else None
    Plain.forward = staticmethod(c_forward if c_forward is not None and setup is None
                                 else python_forward)


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


def refuse_tangents(kernel_name: str, names: list, args: tuple) -> None:
    """Forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``): refused for
    an input carrying a tangent, naming the kernel and the argument."""
    # The fast path: forward_ad's own record of the current level, -1 outside any
    # (checked once per process by tilejit.runtime.host); else every input is asked.
    if tangents_idle():
        return
    for position, value in enumerate(args):
        if isinstance(value, torch.Tensor) and forward_ad.unpack_dual(value).tangent is not None:
            raise RuntimeError(
                f"{kernel_name}: argument {position} '{names[position]}' carries a forward-mode "
                "AD tangent, but tilejit kernels have no forward derivative (only a backward, "
                "kernel.register_autograd); compute the tangent with reverse mode "
                "(torch.func.jacrev / torch.autograd.grad), or pass the primal "
                "(forward_ad.unpack_dual(x).primal)")


def set_backward(name: str, backward, setup_context) -> None:
    """Records the backward of the op ``name`` (``register_autograd``)."""
    rec = record(name)
    rec.backward = (backward, setup_context)
    _choose_forward(rec)


def has_backward_named(name: str) -> bool:
    rec = _records.get(name)
    return rec is not None and rec.backward is not None
