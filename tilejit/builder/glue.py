"""What tilejit compiles around a kernel: the check of its definition against the
signature, and the packed entry the core calls.

A kernel is defined the way its author (or code generator) writes it. tilejit reads that
definition (`tilejit.builder.cdecl`) and accepts it when every parameter is ABI-compatible with
the one declared: the same kind (pointer, integer, floating, bool) and width. Qualifiers,
``restrict`` and spellings of one type are free; a non-const pointer where ``const=True``
is declared is not (unless ``Program.readonly_params`` says a code generator proved it).
Types it cannot name are checked by the compiler: the glue asserts their size.

The glue then calls the kernel with the definition in sight, so C's (and C++'s) own
conversions carry each value to the parameter's type:

    int32_t tilejit_packed_entry(const tilejit_value *a) { return k(a[0].p, (int32_t)a[1].i); }
"""

from __future__ import annotations

from ..language import dtypes as _dtypes
from ..native import abi
from .cdecl import CParam, Definition, classify, find_definition, resolve
from .compiler import CompileError
from .signature import ENTRY_SYMBOL, KernelArg, KernelFunction, Signature

_VALUE_UNION = "typedef union { void *p; int64_t i; double f; } tilejit_value;\n"
# C++: a void * converts to no other pointer implicitly; this does, to whatever pointer
# type the kernel's parameter has (it was checked to be compatible).
_CXX_POINTER = ("struct tilejit_pointer {\n  void *p;\n"
                "  template <class T> operator T *() const { return static_cast<T *>(p); }\n"
                "};\n")


def _what(kind_bits) -> str:
    if kind_bits is None:
        return "a type tilejit cannot name"
    kind, bits = kind_bits
    return {"int": f"{bits}-bit integer", "char": "8-bit char", "float": f"{bits}-bit float",
            "bfloat": "bfloat16", "bool": "bool", "complex": f"complex{bits}",
            "void": "void"}.get(kind, kind)


def _accepted(dtype: str) -> set:
    """The (kind, bits) classes a value or pointee of `dtype` may be written as."""
    d = _dtypes.DTYPES[dtype]
    # Bytes (bool, 8-bit integers and floats) may be written as any 8-bit integer.
    return {(d.c_kind, d.bits)} | ({("int", 8), ("char", 8)} if d.bits == 8 else set())


def _type_text(p: CParam) -> str:
    """The parameter's type as C can spell it in sizeof: its text without the name,
    arrays as pointers, restrict dropped."""
    text = p.text
    if p.name is not None:
        text = text[:text.rindex(p.name)] + text[text.rindex(p.name) + len(p.name):]
    if "[" in text:
        text = text[:text.index("[")] + "*"
    for word in ("__restrict__", "__restrict", "restrict", "__grid_constant__"):
        text = text.replace(word, " ")
    return " ".join(text.split())


def check_definition(program, sig: Signature, definition: Definition,
                     function: KernelFunction | None = None) -> list[str]:
    """Raises CompileError unless `definition` is ABI-compatible with the kernel
    arguments of `function` (default: the signature's first); returns the size assertions
    (C) the glue must make for types tilejit cannot name."""
    kname = program.name
    function = function or sig.functions[0]
    kargs = function.kernel_args
    if function.name != kname:
        kname = f"{kname}: {function.name}"
    if len(definition.params) != len(kargs):
        raise CompileError(kname, reason=(
            f"the definition of {function.name} takes {len(definition.params)} parameter"
            f"{'' if len(definition.params) == 1 else 's'}, the signature declares "
            f"{len(kargs)}: {function.c_prototype}"))
    readonly = set(program.readonly_params)  # indices (Program checked them)
    asserts = []
    for i, (karg, cparam) in enumerate(zip(kargs, definition.params)):
        words, pointer, const = resolve(cparam, definition.typedefs)
        found = classify(words)

        def refuse(why: str, karg=karg, cparam=cparam, i=i) -> CompileError:
            return CompileError(kname, reason=(
                f"parameter {i} '{karg.name}' is declared {karg.c_decl}, the definition has "
                f"'{cparam.text}': {why}"))

        if karg.source == abi.TJ_ABI_TENSORMAP:
            if pointer or "CUtensorMap" not in words:
                raise refuse("expected a tensor map passed by value")
            continue
        item = _dtypes.DTYPES[karg.dtype]
        if karg.pointer:
            if pointer != 1:
                raise refuse("expected a pointer" if pointer == 0 else
                             f"expected a pointer to {karg.dtype}, found {pointer} levels of "
                             "indirection")
            if found is None:
                message = (f"{kname}: parameter {i} '{karg.name}': {cparam.text} must point "
                           f"to {item.itemsize}-byte {karg.dtype} elements")
                asserts.append((f"sizeof(*({_type_text(cparam)})0) == {item.itemsize}", message))
            elif found != ("void", 0) and found not in _accepted(karg.dtype):
                raise refuse(f"a pointer to {_what(found)}, not to {karg.dtype}")
            if karg.const and not const and karg.param not in readonly:
                raise refuse(
                    "the parameter is declared const=True (read-only tensors are accepted), "
                    "so the kernel must take a const pointer; make it const, or list it in "
                    "Program(readonly_params=...) if a code generator proved it read-only")
            continue
        if pointer:
            raise refuse(f"expected a {karg.dtype} value, found a pointer")
        width = item.itemsize
        if found is None:
            message = (f"{kname}: parameter {i} '{karg.name}': {cparam.text} must be a "
                       f"{width}-byte {karg.dtype}")
            asserts.append((f"sizeof({_type_text(cparam)}) == {width}", message))
        elif found not in _accepted(karg.dtype):
            hint = ""
            if karg.source == abi.TJ_ABI_SYMBOL and found[0] == "int":
                hint = (f" (declare T.symbol('{karg.name}', dtype='int{found[1]}') for a "
                        f"{found[1]}-bit symbol)")
            raise refuse(f"{_what(found)}, not {karg.dtype}{hint}")
    return asserts


def returns_status(program, definition: Definition | None) -> bool:
    """Whether the kernel returns an int status (non-zero fails the call)."""
    if definition is None:
        return program.returns_status
    words = definition.returns
    if words in ((), ("void",)):
        return False
    if classify(words) == ("int", 32):
        return True
    raise CompileError(program.name, reason=(
        f"the definition of {program.name} returns '{' '.join(words)}': a kernel returns "
        "void, or an int status (0 for success)"))


def _call_args(kargs: tuple[KernelArg, ...], language: str, declared: bool) -> list[str]:
    """The packed values, one per kernel argument. Pointers go as void * (C converts them
    to the parameter's pointer type) or the C++ converter; values are cast to the declared
    type, and from there converted to the parameter's own."""
    out = []
    for j, karg in enumerate(kargs):
        if karg.pointer and not declared:
            out.append(f"tilejit_pointer{{a[{j}].p}}" if language == "c++" else f"a[{j}].p")
        else:
            field = "p" if karg.pointer else "f" if karg.dtype.startswith("float") else "i"
            out.append(f"({karg.c_type})a[{j}].{field}")
    return out


def _entry(kname: str, call: str, status: bool, language: str) -> str:
    linkage = 'extern "C" ' if language == "c++" else ""
    body = f"return (int32_t){call};" if status else f"{call};\n  return 0;"
    return (f"{linkage}__attribute__((visibility(\"default\"))) int32_t {ENTRY_SYMBOL}("
            f"const tilejit_value *a) {{\n  (void)a;\n  {body}\n}}\n")


def host_source(program, sig: Signature, language: str) -> str:
    """The complete C or C++ file compiled for a CPU kernel: prelude, the user's source,
    glue. ``#line`` directives keep compiler messages pointing at the user's lines."""
    kname = program.name
    definition = find_definition(program.source, kname, len(sig.kernel_args))
    status = returns_status(program, definition)
    parts = [_dtypes.C_PRELUDE, f"#line 1 \"{kname}.{'cc' if language == 'c++' else 'c'}\"\n",
             program.source, "\n", f"#line 1 \"tilejit_glue_{kname}.c\"\n",
             f"/* signature: {sig.c_prototype}; */\n"]
    if definition is None:
        # No definition reads as one (a macro makes it, say): declare tilejit's prototype,
        # and the compiler holds the definition to it.
        # c_prototype returns what Program.returns says, as `status` does here.
        linkage = 'extern "C" ' if language == "c++" else ""
        parts.append(f"{linkage}{sig.c_prototype};\n")
        call_args = _call_args(sig.kernel_args, language, declared=True)
    else:
        asserts = check_definition(program, sig, definition)
        keyword = "static_assert" if language == "c++" else "_Static_assert"
        parts += [f"{keyword}({cond}, \"{message}\");\n" for cond, message in asserts]
        call_args = _call_args(sig.kernel_args, language, declared=False)
    parts.append(_VALUE_UNION)
    if language == "c++":
        parts.append(_CXX_POINTER)
    parts.append(_entry(kname, f"{kname}({', '.join(call_args)})", status, language))
    return "".join(parts)


def prebuilt_glue_source(program, sig: Signature) -> str:
    """The glue for a prebuilt CPU library: the packed entry calls, through the declared
    prototype, the function whose address the core stores in ``tilejit_kernel_function``."""
    status = program.returns_status
    types = ", ".join(a.c_type.strip() for a in sig.kernel_args)
    args = ", ".join(_call_args(sig.kernel_args, "c", declared=True))
    call = f"((tilejit_fn)tilejit_kernel_function)({args})"
    return (f"{_dtypes.C_PRELUDE}{_VALUE_UNION}"
            f"typedef {'int32_t' if status else 'void'} (*tilejit_fn)({types or 'void'});\n"
            "__attribute__((visibility(\"default\"))) void *tilejit_kernel_function;\n"
            + _entry(program.name, call, status, "c"))


def cuda_source_body(program, sig: Signature) -> tuple[str, str]:
    """``(declarations, source)`` for a CUDA program: each kernel function's definition
    checked and given C linkage where the user left it out (``extern "C"`` inserted
    before each declaration), or, when no definition reads as one, tilejit's declaration
    to put before the source."""
    declarations, asserts, starts = [], [], []
    for function in sig.functions:
        definition = find_definition(program.source, function.name,
                                     len(function.kernel_args))
        if definition is None:
            declarations.append(f"{function.c_prototype};\n")
            continue
        asserts += check_definition(program, sig, definition, function)
        starts += list(definition.declarations)
        if not definition.extern_c:
            starts.append(definition.start)
    source = program.source
    for at in sorted(set(starts), reverse=True):
        source = f"{source[:at]} extern \"C\" {source[at:]}"
    checks = "".join(f"static_assert({cond}, \"{message}\");\n" for cond, message in asserts)
    return "".join(declarations), source + ("\n" + checks if checks else "")
