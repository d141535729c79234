"""Inductor calling a kernel without the dispatcher: a fast path.

Inductor calls a custom op from its generated Python through ``OpOverload.__call__`` and
the dispatcher, then checks the size and strides of what it returned; its own ops it
calls as generated loops into buffers it allocated. For the kernels where this is exact
(below), tilejit gives the op an Inductor lowering that does the same for the kernel:
Inductor allocates the output (``empty_strided``, the fake implementation's size and
strides) and calls the kernel's direct call on the inputs and that output, a builtin
function kept on the op (``torch.ops.tilejit.<op>.default.tilejit_direct(arg0_1, arg1_1,
buf0)`` in the generated code): no dispatcher, no Python frame of tilejit's, no size
assertion. The call validates every
argument as a direct call does, the output included, with the same messages.

Which kernels: a CPU kernel compiled in this process (not opened from an export), whose
one output is its last parameter (compact, no alignment beyond the 64 bytes torch's
allocator gives), whose inputs are all required tensors, and whose op writes none of
them. Which graphs: the Python wrapper's (not AOTInductor's C++ one, nor
``cpp_wrapper``, nor the FX wrapper), with an output of backed sizes. Anything else is
the op's fallback kernel, as Inductor makes it for any custom op (its layout
constraint included).

The fast path reads Inductor's internals (``torch._inductor.lowering``'s registry of
lowerings, ``ir.ExternKernelOut``, ``V.graph``): it is used where they are found as
expected, and not with ``TILEJIT_FAST_PATHS=0``, where Inductor calls the op through
the dispatcher (the public path: same results, same checks). A graph compiled with the
fast path and kept in Inductor's cache calls ``tilejit_direct``; every process that
defines the op therefore gives it one, with or without the fast path (for a kernel
opened from an export: the op, its result copied into the output), so that such a graph
runs wherever it is loaded. Inductor's cache does not tell graphs compiled with the fast path
from others: one compiled without it (``TILEJIT_FAST_PATHS=0``, an earlier tilejit) and
cached keeps calling the op until the cache is cleared.

The lowering is installed once Inductor is loaded: tilejit checks where a trace meets
the op (the op's fake implementation, which every trace of the op runs) and never
imports Inductor itself. A graph Inductor
lowers before tilejit has seen it loaded calls the op.
"""

from __future__ import annotations

import sys
import threading

import torch

from ...builder.torch_schema import NAMESPACE, input_kinds
from ...runtime import fast_paths
from ...runtime.fast_paths import FAST_PATHS
from .record import record, waiting_lowerings

_LOWERING = "torch._inductor.lowering"
_ATTRIBUTE = "tilejit_direct"  # the OpOverload's attribute holding the kernel's entry
_ALLOCATOR_ALIGNMENT = 64  # what torch's CPU allocator guarantees (c10's gAlignment)
_NAME = "Inductor lowering (the kernel called without the dispatcher)"
_lock = threading.RLock()
_active: list = []  # [whether the fast path is on], once decided


def entry_expression(name: str) -> str:
    """What the generated code calls: the op's entry, reached from ``torch``."""
    return f"torch.ops.{NAMESPACE}.{name}.default.{_ATTRIBUTE}"


def _of_the_shape(kernel) -> bool:
    """Whether ``kernel`` is of the shape Inductor may call directly: a CPU kernel whose
    one output is its last parameter (compact, aligned as torch allocates) and whose
    inputs are all required tensors."""
    sig = kernel.artifact.signature
    nparams = len(sig.names)
    output = kernel.params[-1]
    # An output Inductor allocates as the fake implementation does, which passes every
    # check of the kernel's (compact, torch's 64-byte alignment): no message of a direct
    # call about it could differ from the op's.
    return (sig.target == "cpu" and tuple(sig.out_idx) == (nparams - 1,)
            and output.strides is None and (output.align or 1) <= _ALLOCATOR_ALIGNMENT
            and input_kinds(kernel.artifact) == "T" * (nparams - 1))


def offer(kernel, op, name: str, writes: bool) -> None:
    """Called for every op defined (``writes``: it writes an argument, which the fast
    path leaves to the op). One of the shape the fast path takes gets its entry
    (``op.tilejit_direct``, with or without the fast path: a graph Inductor cached may
    call it), and, with the fast path, its lowering once Inductor is loaded. Without the
    fast path, and for a kernel opened from an export (a graph calling it was compiled in
    another process), the entry is the op, its result copied into the output."""
    if writes or not _of_the_shape(kernel):
        return
    direct = None
    if FAST_PATHS and not kernel.artifact.exported:
        try:
            direct = kernel._outputs_passed()
        except Exception:  # noqa: BLE001 - its library gone from the cache, say: the op
            direct = None
    setattr(op, _ATTRIBUTE, direct if direct is not None else _through_op(op))
    if direct is not None:
        record(name).offer_lowering()  # its lowering waits for Inductor
        inductor_loaded()


def inductor_loaded() -> None:
    """Called where every trace meets the op (its fake implementation): with Inductor loaded (torch.compile's inductor backend loads it before
    it compiles), the lowering of every op offered, with the fast path."""
    waiting = waiting_lowerings()
    if waiting and _LOWERING in sys.modules:
        with _lock:
            for rec in waiting:
                if not _installed() or not rec.take_lowering():
                    continue
                try:
                    _install(rec.op, rec.name)
                except Exception as exc:  # noqa: BLE001 - Inductor's own fallback stays
                    _active[0] = fast_paths.decided(
                        _NAME, False, f"installing a lowering failed ({exc!r})")


def _through_op(op):
    """``call(*inputs, output)``: the op, its result copied into ``output``."""

    def call(*args):
        args[-1].copy_(op(*args[:-1]))

    return call


def _installed() -> bool:
    """Whether the fast path is on: decided once, when Inductor is first found loaded."""
    if not _active:
        why = _refusal()
        _active.append(why is None)
        fast_paths.decided(_NAME, why is None, why or "the kernel called directly, output "
                                                      "allocated by Inductor")
    return _active[0]


def decide() -> bool:
    """Decides the fast path now, importing Inductor (``python -m tilejit doctor``); a
    process that compiles decides it when Inductor is first found loaded."""
    if not FAST_PATHS:
        return fast_paths.decided(_NAME, False, "TILEJIT_FAST_PATHS=0: Inductor's fallback "
                                  "kernel (the op through the dispatcher)")
    return _installed()


def _refusal() -> str | None:
    """Why the fast path is off, or None (asked only with the fast paths on: ``offer``
    makes no direct entry without them)."""
    try:
        from torch._inductor import ir, lowering
        from torch._inductor import utils as inductor_utils
        from torch._inductor.virtualized import V  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure: the dispatcher's path
        return f"torch._inductor not importable ({exc})"
    needed = [(lowering, "make_fallback"), (lowering, "register_lowering"),
              (lowering, "lowerings"), (lowering, "get_layout_constraint_tag"),
              (lowering, "tag_to_layout_constraint"), (ir, "ExternKernelOut"),
              (ir, "FixedLayout"), (ir, "TensorBox"), (ir, "ExternKernel"),
              (inductor_utils, "convert_shape_to_inductor")]
    missing = [f"{module.__name__}.{attr}" for module, attr in needed
               if not hasattr(module, attr)]
    if missing:
        return f"this torch's Inductor lacks {', '.join(missing)}"
    return None


_call_class: list = []


def _call_node():
    """``ir.ExternKernelOut`` whose generated call passes the output positionally (the
    kernel's last parameter) rather than as ``out=``."""
    if not _call_class:
        from torch._inductor import ir

        class TilejitKernelCall(ir.ExternKernelOut):
            def codegen(self, wrapper) -> None:
                self.codegen_comment(wrapper)
                args = [*self.codegen_args(), self.codegen_reference()]
                wrapper.writeline(f"{self.get_kernel_name()}({', '.join(args)})")

        _call_class.append(TilejitKernelCall)
    return _call_class[0]


def _install(op, name: str) -> None:
    """The op's lowering: the fallback Inductor makes for any custom op (with the layout
    constraint of its tags, which puts the inputs in the strides they were traced with),
    and in front of it, where it applies, the kernel called directly."""
    from torch._inductor import config, ir, lowering
    from torch._inductor.utils import convert_shape_to_inductor
    from torch._inductor.virtualized import V
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    if op not in lowering.lowerings:
        tag = lowering.get_layout_constraint_tag(op, with_default=True)
        lowering.make_fallback(op, layout_constraint=lowering.tag_to_layout_constraint(tag),
                               warn=False)
    fallback = lowering.lowerings[op]
    kernel_name = entry_expression(name)
    ninputs = len(op._schema.arguments)

    def lower(*args, **kwargs):
        graph = V.graph
        node = graph.current_node
        value = node.meta.get("val") if node is not None else None
        if (kwargs or len(args) != ninputs or graph.cpp_wrapper or graph.aot_mode
                or getattr(config, "fx_wrapper", False)
                or not all(isinstance(arg, ir.IRNode) for arg in args)
                or not isinstance(value, torch.Tensor) or value.device.type != "cpu"
                or free_unbacked_symbols(value)):
            return fallback(*args, **kwargs)
        layout = ir.FixedLayout(value.device, value.dtype,
                                convert_shape_to_inductor(value.size()),
                                convert_shape_to_inductor(value.stride()))
        inputs = [ir.ExternKernel.realize_input(arg) for arg in args]
        return ir.TensorBox.create(_call_node()(layout, inputs, python_kernel_name=kernel_name))

    lowering.register_lowering(op, type_promotion_kind=None)(lower)
