"""Inductor calling a kernel without the dispatcher: a fast path.

Inductor calls a custom op from its generated Python through ``OpOverload.__call__`` and
the dispatcher, then checks the size and strides of what it returned; its own ops it
calls as generated loops into buffers it allocated. For the kernels where this is exact
(below), tilejit gives the op an Inductor lowering that does the same for the kernel:
Inductor allocates the output (``empty_strided``, the fake implementation's size and
strides) and calls the kernel's direct call on the inputs and that output, a builtin
function (``extern_kernels.tilejit_<op>(arg0_1, arg1_1, buf0)`` in the generated code): no
dispatcher, no Python frame of tilejit's, no size assertion. The call validates every
argument as a direct call does, the output included, with the same messages.

Which kernels: a CPU kernel compiled in this process (not opened from an export), whose
one output is its last parameter, whose inputs are all required tensors, and whose op
writes none of them. Which graphs: the Python wrapper's (not AOTInductor's C++ one, nor
``cpp_wrapper``, nor the FX wrapper), with an output of backed sizes. Anything else is
the op's fallback kernel, as Inductor makes it for any custom op (its layout
constraint included).

The fast path reads Inductor's internals (``torch._inductor.lowering``'s registry of
lowerings, ``ir.ExternKernelOut``, the wrapper's ``extern_kernels`` namespace): it is
used where they are found as expected, and not with ``TILEJIT_FAST_PATHS=0``, where
Inductor calls the op through the dispatcher (the public path: same results, same
checks). A graph compiled with the fast path and kept in Inductor's cache names
``extern_kernels.tilejit_<op>``; every process that defines the op while Inductor is
loaded therefore provides the name, with or without the fast path (for a kernel opened
from an export: the op, its result copied into the output), so that such a graph runs
wherever it is loaded. Inductor's cache does not tell graphs compiled with the fast path
from others: one compiled without it (``TILEJIT_FAST_PATHS=0``, an earlier tilejit) and
cached keeps calling the op until the cache is cleared.

The lowering is installed when Inductor is loaded, which ``torch.compile`` with the
inductor backend does before it traces: tilejit checks at trace time
(``dynamo._registered_op_name``) and never imports Inductor itself.
"""

from __future__ import annotations

import sys
import threading

import torch

from ...builder.signature import lower as _lower_signature
from ...builder.torch_schema import input_kinds
from ...runtime import fast_paths
from ...runtime.fast_paths import FAST_PATHS

_LOWERING = "torch._inductor.lowering"
_lock = threading.RLock()
_offered: dict = {}  # op name -> (kernel, op): every op of the shape the fast path takes
_pending: list = []  # op names offered, not yet given their name in extern_kernels
_active: list = []  # [whether the fast path is on], once decided
_NAME = "Inductor lowering (extern call without the dispatcher)"


def extern_name(op_name: str) -> str:
    """The attribute of Inductor's ``extern_kernels`` that calls the op's kernel."""
    return f"tilejit_{op_name}"


def _of_the_shape(kernel, op) -> bool:
    """Whether ``kernel`` (whose op is ``op``) is of the shape Inductor may call directly:
    a CPU kernel whose one output is its last parameter, whose inputs are all required
    tensors, whose op writes none of them."""
    sig = kernel._sig
    nparams = len(sig.names)
    return (sig.target == "cpu" and tuple(sig.out_idx) == (nparams - 1,)
            and input_kinds(kernel) == "T" * (nparams - 1)
            and not any(arg.alias_info is not None and arg.alias_info.is_write
                        for arg in op._schema.arguments))


def offer(kernel, op, name: str) -> None:
    """Called for every op defined: one of the shape the fast path takes is named in
    Inductor's ``extern_kernels``, and lowered with the fast path, once Inductor is
    loaded."""
    if not _of_the_shape(kernel, op):
        return
    with _lock:
        if name not in _offered:
            _offered[name] = (kernel, op)
            _pending.append(name)
        if _LOWERING in sys.modules:
            _provide_pending()


def inductor_loaded() -> None:
    """Called while Dynamo traces a kernel's call: with Inductor loaded (torch.compile's
    inductor backend loads it before tracing), every op offered gets its name, and its
    lowering with the fast path."""
    if _pending and _LOWERING in sys.modules:
        with _lock:
            _provide_pending()


def _provide_pending() -> None:
    """Each pending op's entry in ``extern_kernels`` (with or without the fast path: a
    graph Inductor cached may call it) and, with the fast path, its lowering (``_lock``
    held, Inductor loaded). A kernel opened from an export is called through its op
    there, its output copied: such a graph was compiled in another process, where the
    kernel was compiled."""
    from torch._inductor.select_algorithm import extern_kernels

    while _pending:
        name = _pending.pop()
        kernel, op = _offered[name]
        direct = None
        if kernel._export_images is None:
            try:
                direct = _direct_kernel(kernel)
            except Exception:  # noqa: BLE001 - its library gone from the cache, say: the op
                direct = None
        setattr(extern_kernels, extern_name(name),
                direct if direct is not None else _through_op(op))
        if direct is not None and _installed():
            try:
                _install(op, name)
            except Exception as exc:  # noqa: BLE001 - Inductor's own fallback stays
                _active[0] = fast_paths.decided(_NAME, False, f"installing a lowering failed "
                                                              f"({exc!r})")


def _through_op(op):
    """``call(*inputs, output)``: the op, its result copied into ``output``."""

    def call(*args):
        args[-1].copy_(op(*args[:-1]))

    return call


def _direct_kernel(kernel):
    """The kernel with its output passed, not allocated: the same compiled library, the
    same validation; called with the inputs and the output in declaration order."""
    from ...runtime.kernel import JITKernel

    sig = _lower_signature(kernel.program, None, kernel._sig.target)
    direct = JITKernel(kernel.program, sig, kernel.library_path, kernel._host_source,
                       kernel.execution_backend, kernel._prebuilt,
                       binary_digests=kernel._binary_digests)
    JITKernel._alive.discard(direct)  # not a kernel of the user's: no op of its own
    return direct


def _installed() -> bool:
    """Whether the fast path is on: decided once, when Inductor is first found loaded."""
    if not _active:
        why = _refusal()
        _active.append(why is None)
        fast_paths.decided(_NAME, why is None, why or "the kernel called directly, output "
                                                      "allocated by Inductor")
    return _active[0]


def _refusal() -> str | None:
    """Why the fast path is off, or None."""
    if not FAST_PATHS:
        return "TILEJIT_FAST_PATHS=0: Inductor calls the op through the dispatcher"
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
    kernel_name = f"extern_kernels.{extern_name(name)}"
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
