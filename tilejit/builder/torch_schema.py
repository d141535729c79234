"""A kernel's torch op as text, with no torch needed: its schema, written from the kernel's
artifact, the same in every process (the op of a kernel and of its export,
``torch_op.so``, are one; its name is ``Artifact.op_name``)."""

from __future__ import annotations

import keyword

from ..language.lang import Buffer, PointerParam, Scalar

NAMESPACE = "tilejit"


def kernel_name_of(op: str) -> str:
    """The kernel's name in its op's name (``Artifact.op_name``, less the hash)."""
    return op[:-len("_0123456789abcdef")]


def _arg_name(name: str) -> str:
    # Schema argument names are read back as Python identifiers; `out` marks out= variants.
    return f"{name}_" if keyword.iskeyword(name) or name == "out" else name


def inputs(artifact) -> list[tuple[int, str, str]]:
    """``(parameter index, name, kind)`` of each input of the kernel's op in call order,
    the kind one character as the core's C kernels read it (tilejit/torch.h): ``T`` a
    Tensor, ``t`` a Tensor? (an optional buffer), ``i`` a SymInt, ``f`` a float, ``b`` a
    bool. A ``T.Pointer`` parameter, which no op can take, is a TypeError."""
    sig = artifact.signature
    found = []
    for i in sig.inputs:
        param = artifact.params[i]
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


def input_kinds(artifact) -> str:
    """The kinds of ``inputs``, one character each (``torch_op.txt``'s ``inputs``)."""
    return "".join(kind for _, _, kind in inputs(artifact))


_SCALAR_TYPES = {"i": "SymInt", "f": "float", "b": "bool"}


def schema(artifact) -> tuple[str, tuple[str, ...]]:
    """``(schema, mutated argument names)`` of the op of the kernel of ``artifact``.

    >>> schema(vec_add.artifact)
    ('(Tensor A, Tensor B) -> Tensor', ())
    """
    args, mutated = [], []
    found = inputs(artifact)
    # The optional buffers after the last required input may be left out, as in a direct
    # call: they default to None.
    last_required = max((j for j, (_, _, kind) in enumerate(found) if kind != "t"), default=-1)
    for j, (i, name, kind) in enumerate(found):
        name = _arg_name(name)
        if kind in "Tt":
            alias = "" if artifact.params[i].const else f"(a{len(mutated)}!)"
            if alias:
                mutated.append(name)
            text = f"Tensor{alias}{'?' if kind == 't' else ''}"
        else:
            text = _SCALAR_TYPES[kind]
        args.append(f"{text} {name}{'=None' if j > last_required else ''}")
    count = len(artifact.signature.out_idx)
    returns = "Tensor" if count == 1 else f"({', '.join(['Tensor'] * count)})"
    return f"({', '.join(args)}) -> {returns}", tuple(mutated)


def implementable_in_c(artifact) -> bool:
    """Whether the core's C kernel can run the kernel's op: its outputs are allocated like
    a required tensor input (without one, Python's implementation makes them)."""
    sig, params = artifact.signature, artifact.params
    return not sig.out_idx or any(
        isinstance(params[i], Buffer) and not params[i].optional for i in sig.inputs)


def export_text(artifact) -> str | None:
    """``torch_op.txt`` of the export of the kernel of ``artifact`` (tilejit/torch.h, tj_torch_open_export), or
    None for a kernel whose op the C kernel cannot run."""
    try:
        text, _ = schema(artifact)
    except TypeError:  # a T.Pointer parameter: no op
        return None
    if not implementable_in_c(artifact):
        return None
    return "\n".join([
        "tilejit-torch-op 1", f"namespace {NAMESPACE}", f"schema {artifact.op_name}{text}",
        f"inputs {input_kinds(artifact) or '-'}",
        " ".join(["order", *map(str, artifact.signature.output_order)]), ""])
