"""A kernel's torch op as text, with no torch needed: its name and its schema, the same in
every process (the op of a kernel and of its export, ``torch_op.so``, are one)."""

from __future__ import annotations

import keyword

from ..language.lang import Buffer, PointerParam, Scalar
from .cache import artifact_key

NAMESPACE = "tilejit"


def kernel_name_of(op: str) -> str:
    """The kernel's name in its op's name (``op_name``'s, less the hash)."""
    return op[:-len("_0123456789abcdef")]


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


def inputs(kernel) -> list[tuple[int, str, str]]:
    """``(parameter index, name, kind)`` of each input of ``kernel``'s op in call order,
    the kind one character as the core's C kernels read it (tilejit/torch.h): ``T`` a
    Tensor, ``t`` a Tensor? (an optional buffer), ``i`` a SymInt, ``f`` a float, ``b`` a
    bool. A ``T.Pointer`` parameter, which no op can take, is a TypeError."""
    sig = kernel._sig
    found = []
    for i in sig.inputs:
        param = kernel.params[i]
        if isinstance(param, Buffer):
            kind = "t" if param.optional else "T"
        elif isinstance(param, Scalar):
            kind = ("b" if param.dtype == "bool" else
                    "f" if param.dtype.startswith("float") else "i")
        else:
            assert isinstance(param, PointerParam)
            raise TypeError(f"{sig.name}: parameter {i} '{sig.names[i]}' is a T.Pointer, which "
                            "a torch op cannot take (it has no shape or device for torch to "
                            "trace); declare it as a T.Buffer to use the kernel in torch")
        found.append((i, sig.names[i], kind))
    return found


def input_kinds(kernel) -> str:
    """The kinds of ``inputs``, one character each (``torch_op.txt``'s ``inputs``)."""
    return "".join(kind for _, _, kind in inputs(kernel))


_SCALAR_TYPES = {"i": "SymInt", "f": "float", "b": "bool"}


def schema(kernel) -> tuple[str, tuple[str, ...]]:
    """``(schema, mutated argument names)`` for ``kernel``.

    >>> schema(vec_add)
    ('(Tensor A, Tensor B) -> Tensor', ())
    """
    args, mutated = [], []
    found = inputs(kernel)
    # The optional buffers after the last required input may be left out, as in a direct
    # call: they default to None.
    last_required = max((j for j, (_, _, kind) in enumerate(found) if kind != "t"), default=-1)
    for j, (i, name, kind) in enumerate(found):
        name = _arg_name(name)
        if kind in "Tt":
            alias = "" if kernel.params[i].const else f"(a{len(mutated)}!)"
            if alias:
                mutated.append(name)
            text = f"Tensor{alias}{'?' if kind == 't' else ''}"
        else:
            text = _SCALAR_TYPES[kind]
        args.append(f"{text} {name}{'=None' if j > last_required else ''}")
    count = len(kernel._sig.out_idx)
    returns = "Tensor" if count == 1 else f"({', '.join(['Tensor'] * count)})"
    return f"({', '.join(args)}) -> {returns}", tuple(mutated)


def implementable_in_c(kernel) -> bool:
    """Whether the core's C kernel can run ``kernel``'s op: its outputs are allocated like
    a required tensor input (without one, Python's implementation makes them)."""
    sig = kernel._sig
    return not sig.out_idx or any(
        isinstance(kernel.params[i], Buffer) and not kernel.params[i].optional
        for i in sig.inputs)


def export_text(kernel) -> str | None:
    """``torch_op.txt`` of ``kernel``'s export (tilejit/torch.h, tj_torch_open_export), or
    None for a kernel whose op the C kernel cannot run."""
    try:
        text, _ = schema(kernel)
    except TypeError:  # a T.Pointer parameter: no op
        return None
    if not implementable_in_c(kernel):
        return None
    return "\n".join([
        "tilejit-torch-op 1", f"namespace {NAMESPACE}", f"schema {op_name(kernel)}{text}",
        f"inputs {input_kinds(kernel) or '-'}",
        " ".join(["order", *map(str, kernel._sig.output_order)]), ""])
