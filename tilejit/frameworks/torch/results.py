"""The one conversion between a kernel's result and its torch op's.

A kernel call returns what the core assembles (``core/src/host.c``): None, the one
output, or a list of the outputs in ``out_idx`` order. A torch op's schema returns None,
one tensor, or a tuple. The op returns the op's shape; a call that runs as the op (a
claimed call, a traced call) gives its caller the kernel's shape back.
"""

from __future__ import annotations


def op_result(outputs: list):
    """The outputs of a kernel (a list in ``out_idx`` order) as its op returns them."""
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def as_op_result(result):
    """A kernel call's result as its op returns it: several outputs as a tuple
    (``op_result(outputs_of(result))``, in one step for the recorded calls' hot path)."""
    return tuple(result) if isinstance(result, list) else result


def outputs_of(result) -> list:
    """The outputs of a kernel call's result (the kernel's shape), as a list."""
    if result is None:
        return []
    return result if isinstance(result, list) else [result]


def op_outputs(result) -> tuple:
    """The outputs of an op's result (the op's shape: None, a tensor or a tuple)."""
    if result is None:
        return ()
    return result if isinstance(result, tuple) else (result,)


def kernel_result(result):
    """An op's result as the kernel call returns it: several outputs as a list."""
    return list(result) if isinstance(result, tuple) else result
