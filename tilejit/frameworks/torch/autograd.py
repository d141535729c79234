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

_backwards: dict = {}  # op name -> (backward, setup_context), as registered
_recorded: dict = {}  # op name -> its autograd.Function (_autograd_kernel)
_appliers: dict = {}  # op name -> how claimed_call records a call (`applier`)
_BELOW = "below autograd"  # forward's keyset from `fallback_kernel`: the op, below autograd
_plain_bases: dict = {}  # op name -> the C apply of its Function for plain calls (`plain_applier`)
_keyless: dict = {}  # op name -> its autograd kernel without a keyset (`fallback_kernel`)
_bases: dict = {}  # op name -> the C apply of its Function (`base_applier`), fast paths on

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
    outputs = set(kernel._sig.out_idx)
    return [n for i, n in enumerate(kernel._sig.names) if i not in outputs]


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
    """
    label = kernel.name
    names = input_names(kernel)
    count = len(names)
    after = torch._C._after_autograd_keyset
    below = torch._C._AutoDispatchBelowAutograd

    def run(keyset, args):
        with below():
            return op.redispatch(keyset & after, *args)

    def run_below(args):  # the op, below autograd, when there is no keyset to hand over
        with below():
            return op(*args)

    def recorded(args) -> bool:
        """What the Autograd kernel does with a call: tangents refused, then True to
        record it, False to run it below autograd; refused without a backward."""
        refuse_tangents(label, names, args)
        position = requiring_grad(args)
        if position is None:
            return False
        if name not in _backwards:
            # torch.export (and AOTInductor, which exports) captures the op as it does a
            # torch custom op without autograd: a module's parameters require grad there.
            if torch.compiler.is_exporting():
                return False
            raise RuntimeError(_no_backward(label, position, names[position]))
        return True

    # An op that writes its arguments goes through the dispatcher, which bumps their
    # version counters; one that does not runs the kernel itself, as the op would.
    direct = not any(arg.alias_info is not None and arg.alias_info.is_write
                     for arg in op._schema.arguments)

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
        _, setup = _backwards[name]
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
        registered, _ = _backwards[name]
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            result = registered(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*(result if isinstance(result, tuple) else (result,)), None)

    # forward and setup_context apart, as torch.func's transforms require. Named after the
    # kernel: its outputs' grad_fn is <kernel>Backward. Under vmap, torch.func batches it
    # by running forward and backward per slice.
    Recorded = type(label, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True})
    _recorded[name] = Recorded
    if apply_checked():
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
        _bases[name] = base_apply
        if direct:
            single = kernel._core_kernel.num_outputs == 1
            _plain_bases[name] = _plain_apply(label, name, unclaimed,
                                              kernel._forward if single else None)
    else:
        apply = Recorded.apply
    _appliers[name] = apply

    def autograd_kernel(keyset, *args):
        if len(args) < count:
            args = _padded(args, count)
        return Recorded.apply(*args, keyset) if recorded(args) else run(keyset, args)

    def without_keyset(*args):
        # The same, for the op's C autograd kernel (native_op), which has no keyset to
        # hand over: below autograd is where grad mode off and the guard send the op.
        if len(args) < count:
            args = _padded(args, count)
        return _appliers[name](*args, _BELOW) if recorded(args) else run_below(args)

    _keyless[name] = without_keyset
    return autograd_kernel


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


def _plain_apply(label: str, name: str, unclaimed, forward_entry=None):
    """The C apply of the op's Function for the calls that matter most: plain tensors, no
    transform, an op that writes no argument. Its forward takes exactly the kernel's
    inputs (no keyset rides along), runs the kernel and the registered ``setup_context``;
    its backward is the registered one. Same name, same gradients as `_single_apply`'s.
    ``forward_entry`` (a kernel of one output: ``JITKernel._forward``) is the forward
    itself while no ``setup_context`` is registered: the kernel's call with ``ctx`` left
    out, no Python frame (`_choose_forward`, again at every registration)."""

    def forward(ctx, *args):
        output = as_op_result(unclaimed(*args))
        _, setup = _backwards[name]
        if setup is not None:
            setup(ctx, args, output)
        return output

    def backward(ctx, *grads):
        return _backwards[name][0](ctx, *grads)

    Plain = type(label, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(backward)})
    _plain_forwards[name] = (Plain, forward, forward_entry)
    _choose_forward(name)
    return super(torch.autograd.Function, Plain).apply


_plain_forwards: dict = {}  # op name -> (its plain Function, Python forward, C forward)


def _choose_forward(name: str) -> None:
    """The plain Function's forward for the op's registration: the C one without a
    ``setup_context`` (nothing else for the forward to do), else the Python one."""
    if name not in _plain_forwards:
        return
    Plain, python_forward, c_forward = _plain_forwards[name]
    setup = _backwards[name][1] if name in _backwards else None
    Plain.forward = staticmethod(c_forward if c_forward is not None and setup is None
                                 else python_forward)


def fallback_kernel(kernel, op, name: str):
    """The op's autograd kernel without the dispatcher's keyset (``autograd_kernel``'s
    meaning), for the C autograd kernel to hand the calls it cannot run itself to."""
    if name not in _keyless:
        autograd_kernel(kernel, op, name)
    return _keyless[name]


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


def backwards_and_appliers() -> tuple[dict, dict]:
    """The registries ``claimed_call`` reads on every recorded call: op name -> backward
    (``set_backward``), op name -> its applier (``applier``)."""
    return _backwards, _appliers


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
    _backwards[name] = (backward, setup_context)
    _choose_forward(name)


def has_backward_named(name: str) -> bool:
    return name in _backwards


def recorded(name: str):
    """The ``autograd.Function`` that records calls of the op ``name``."""
    return _recorded[name]


def base_applier(name: str):
    """``apply(*args, None)`` without the checks of ``applier``: the C apply, for a caller
    that has made sure no functorch transform is active and no input is a functorch
    wrapper; None when the fast path is off (then ``applier``)."""
    return _bases.get(name)


def plain_applier(name: str):
    """``apply(*args)`` for a caller that has made sure of ``base_applier``'s conditions
    and that every input is a plain tensor (``PLAIN_TENSORS``, no functorch wrapper) or not
    a tensor: the C apply of a Function that runs the kernel at once (`_plain_apply`);
    None for an op that writes an argument (its calls go through the dispatcher, which
    bumps the version counters) or with the fast path off."""
    return _plain_bases.get(name)


def applier(name: str):
    """``apply(*args, None)``: records a call of the op ``name`` from Python, as
    ``recorded(name).apply`` does (with the fast path, minus its signature binding)."""
    return _appliers[name]
