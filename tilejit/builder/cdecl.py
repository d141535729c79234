"""Reading a kernel's own definition out of its C, C++ or CUDA source.

tilejit never forces its prototype onto a kernel. It finds the definition (and any
forward declarations) of the entry function in the source, reads each parameter's type,
and checks it against the signature for ABI compatibility: the same kind (pointer,
integer, floating, bool) and width, any spelling. What it cannot name (a type from a
header it does not parse) it leaves to the compiler: the glue asserts the type's size.

>>> d = find_definition("int softmax(const float *x, float *y, int rows, long cols) {}",
...                     "softmax")
>>> [(p.words, p.pointer, p.const) for p in d.params]
[(('float',), 1, True), (('float',), 1, False), (('int',), 0, False), (('long',), 0, False)]
>>> classify(d.params[3].words)
('int', 64)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..language import dtypes as _dtypes

# Qualifiers and attributes that do not change a parameter's ABI.
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict__", "__restrict", "struct", "enum",
               "union", "typename", "__grid_constant__", "register"}
# Declaration specifiers before a function's return type.
_SPECIFIERS = {"extern", "static", "inline", "__inline__", "__inline", "__global__",
               "__device__", "__host__", "__forceinline__", "__noinline__", "constexpr",
               "__attribute__", "__launch_bounds__", "__declspec", "TL_DEVICE", "TVM_DLL"}
_INT_WORDS = {"char", "short", "int", "long", "signed", "unsigned"}

# Named types by what they are: (kind, bits). int and uint are one kind: a pointer's
# pointee and a value's signedness are free, its width is not.
# The (kind, bits) each C spelling of an element type reads as (dtypes.DType.c_type and
# c_names), and the C types beyond them a kernel's ABI passes.
_NAMED = {name: (d.c_kind, d.bits) for d in _dtypes.DTYPES.values()
          for name in (d.c_type, *d.c_names)}
_NAMED.update({"size_t": ("int", 64), "ssize_t": ("int", 64), "ptrdiff_t": ("int", 64),
               "intptr_t": ("int", 64), "uintptr_t": ("int", 64), "index_t": ("int", 64),
               "void": ("void", 0)})

_COMPLEX_TEMPLATE = re.compile(r"^(?:\w+::)*complex<(float|double)>$")


@dataclass(frozen=True)
class CParam:
    text: str                 # as written, whitespace collapsed
    words: tuple[str, ...]    # the type's words, qualifiers and namespaces removed
    pointer: int              # levels of indirection (an array parameter counts one)
    const: bool               # the pointee (or the value) is const
    name: str | None


@dataclass(frozen=True)
class Definition:
    returns: tuple[str, ...]  # the return type's words
    params: tuple[CParam, ...]
    extern_c: bool            # declared with C linkage where it is defined
    start: int                # offset of the definition's first specifier
    declarations: tuple[int, ...]  # offsets of forward declarations without extern "C"
    typedefs: dict


def _blank(source: str) -> str:
    """The source with comments, string and char literals and preprocessor lines blanked
    (same length, newlines kept), so offsets stay valid and nothing inside them parses."""
    out = list(source)
    i, n = 0, len(source)
    line_start = True
    while i < n:
        c = source[i]
        if line_start and c == "#":
            j = i
            while j < n and source[j] != "\n":
                if source[j] == "\\" and j + 1 < n and source[j + 1] == "\n":
                    j += 1
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c in " \t\r":
            i += 1
            continue
        line_start = c == "\n"
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _matching(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at `open_at`, or -1."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    close = pairs[text[open_at]]
    opener = text[open_at]
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


_ATTRIBUTE = re.compile(r"\b(?:__attribute__|__launch_bounds__|__declspec|alignas)\s*\(")


def _drop_attributes(text: str) -> str:
    while True:
        m = _ATTRIBUTE.search(text)
        if m is None:
            return text
        end = _matching(text, m.end() - 1)
        text = text[:m.start()] + " " + (text[end + 1:] if end >= 0 else "")


def _param(text: str) -> CParam:
    text = " ".join(_drop_attributes(text).split())
    work = re.sub(r"(?:\w+::)*complex\s*<\s*(float|double)\s*>", r"complex<\1>", text)
    pointer = work.count("*") + work.count("&")
    if "[" in work:
        pointer += 1
        work = work[:work.index("[")]
    # `float *const p` is a const pointer to non-const floats: only what comes before
    # the first '*' qualifies the pointee.
    const = "const" in re.findall(r"\w+", re.split(r"[*&]", work)[0])
    tokens = re.findall(r"(?:\w+::)*(?:complex<\w+>|\w+)", work)
    words = [t.split("::")[-1] for t in tokens if t not in _QUALIFIERS]
    name = None
    if len(words) >= 2 and words[-1] not in _NAMED and words[-1] not in _INT_WORDS:
        name = words.pop()
    return CParam(text, tuple(words), pointer, const, name)


_TYPEDEF = re.compile(r"\btypedef\s+([^;{}()]+?)\s*\b(\w+)\s*;")
_USING = re.compile(r"\busing\s+(\w+)\s*=\s*([^;{}()]+?)\s*;")


def _typedefs(blanked: str) -> dict:
    found = {}
    for m in _TYPEDEF.finditer(blanked):
        found[m.group(2)] = m.group(1)
    for m in _USING.finditer(blanked):
        found[m.group(1)] = m.group(2)
    return found


def find_definition(source: str, name: str, arity: int | None = None) -> Definition | None:
    """The definition of function `name` in `source` that the compiler sees, or None when
    there is none that reads as one (a definition a macro expands to, say).

    Only definitions at namespace scope count (not in a class's or a function's body),
    and none inside a group the preprocessor always drops (``#if 0``). Of several (one
    per ``#ifdef`` branch, or C++ overloads), the first taking `arity` parameters, when
    given, else the first."""
    blanked = _blank(_drop_dead_groups(source))
    outside = _namespace_scope(source, blanked)
    found, declarations = [], []
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", blanked):
        if not outside(m.start()):
            continue
        open_at = m.end() - 1
        close = _matching(blanked, open_at)
        if close < 0:
            continue
        after = _drop_attributes(blanked[close + 1:close + 400]).lstrip()
        after = re.sub(r"^(?:noexcept|throw\s*\(\s*\))\s*", "", after)
        if not after or after[0] not in "{;":
            continue
        start = _statement_start(blanked, m.start())
        head = blanked[start:m.start()]
        head_words = re.findall(r"\w+", _drop_attributes(head))
        if not head_words or head_words[-1] in {"return", "else", "do"}:
            continue  # a call, not a declaration
        if re.search(r"[=(,]\s*$", head) or head.rstrip().endswith("::"):
            continue
        extern_c = bool(re.search(r'\bextern\s+"', source[start:m.start()])) or \
            _in_extern_c_block(source, blanked, m.start())
        if after[0] == ";":
            if not extern_c:
                declarations.append(start)
            continue
        returns = tuple(w for w in head_words if w not in _SPECIFIERS and w not in _QUALIFIERS
                        and w != "C" and not w.isdigit())
        params_text = blanked[open_at + 1:close].strip()
        items = [] if params_text in ("", "void") else _split_top(params_text)
        found.append((returns, tuple(_param(p) for p in items), extern_c, start))
    if not found:
        return None
    returns, params, extern_c, start = next(
        (d for d in found if len(d[1]) == arity), found[0])
    declarations = [d for d in declarations if d < start]
    return Definition(returns, params, extern_c, start, tuple(declarations), _typedefs(blanked))


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$")
_CONSTANT = re.compile(r"^\s*\(?\s*(0+|1|false|true)\s*\)?\s*(?:(?://|/\*).*)?$")


def _drop_dead_groups(source: str) -> str:
    """The source with every line of a group the preprocessor always drops blanked (same
    length): ``#if 0`` up to its ``#else``, ``#elif`` or ``#endif``, and what follows
    ``#if 1``'s group. Any other condition may hold, and its lines stay."""
    stack: list[list[bool]] = []  # per open #if: [current group dropped, later ones dropped]
    out = []
    for line in source.splitlines(keepends=True):
        m = _DIRECTIVE.match(line)
        directive = m.group(1) if m else None
        if directive in ("if", "ifdef", "ifndef"):
            constant = _CONSTANT.match(m.group(2)) if directive == "if" else None
            value = None if constant is None else constant.group(1) in ("1", "true")
            stack.append([value is False, value is True])
        elif directive in ("else", "elif") and stack:
            stack[-1][0] = stack[-1][1]
        elif directive == "endif" and stack:
            stack.pop()
        if any(group[0] for group in stack):
            line = "".join(c if c in "\r\n" else " " for c in line)
        out.append(line)
    return "".join(out)


_SCOPE_OPENER = re.compile(r'(?:\bextern\s+"C"|\bnamespace(?:\s+[\w:]+)?)\s*$')


def _namespace_scope(source: str, blanked: str):
    """A test of whether an offset lies at namespace scope: outside every brace pair but
    those of ``extern "C" {`` blocks and namespaces (a function's, class's or
    initializer's braces)."""
    spans, stack = [], []
    for i, c in enumerate(blanked):
        if c == "{":
            transparent = _SCOPE_OPENER.search(source[max(0, i - 200):i])
            stack.append((i, bool(transparent)))
        elif c == "}" and stack:
            at, transparent = stack.pop()
            if not transparent and all(outer for _, outer in stack):
                spans.append((at, i))
    spans += [(at, len(blanked)) for at, transparent in stack if not transparent]

    def outside(offset: int) -> bool:
        return not any(at < offset <= end for at, end in spans)

    return outside


def _statement_start(blanked: str, at: int) -> int:
    """Where the declaration containing offset `at` begins: after the previous `;`, `{`
    or `}` at the same level (skipping `extern "C" {`)."""
    i = at - 1
    depth = 0
    while i >= 0:
        c = blanked[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
        elif depth == 0 and c in ";{}":
            return i + 1
        i -= 1
    return 0


def _in_extern_c_block(source: str, blanked: str, at: int) -> bool:
    for m in re.finditer(r'\bextern\s+"C"\s*\{', source[:at]):
        close = _matching(blanked, m.end() - 1)
        if close < 0 or close > at:
            return True
    return False


def resolve(param: CParam, typedefs: dict) -> tuple[tuple[str, ...], int, bool]:
    """``(words, pointer, const)`` of a parameter with the source's own typedefs expanded
    (``typedef float real;``, ``typedef const float *cfptr;``, ``using idx = int;``)."""
    words, pointer, const = param.words, param.pointer, param.const
    for _ in range(8):
        if len(words) != 1 or words[0] in _NAMED or words[0] not in typedefs:
            break
        target = _param(typedefs[words[0]] + " tj_typedef_name")
        if pointer == 0:
            const = target.const if target.pointer else const or target.const
        words, pointer = target.words, pointer + target.pointer
    return words, pointer, const


def classify(words: tuple[str, ...]):
    """``(kind, bits)`` of a type given by its words, or None when it cannot tell (then
    the glue asks the compiler for its size)."""
    if not words:
        return None
    if len(words) == 1 and _COMPLEX_TEMPLATE.match(words[0]):
        return ("complex", 64 if "float" in words[0] else 128)
    if all(w in _INT_WORDS for w in words):
        if "char" in words:
            return ("char", 8)
        if "short" in words:
            return ("int", 16)
        if "long" in words:
            return ("int", 64)
        return ("int", 32)
    if "_Complex" in words or "complex" in words:
        rest = [w for w in words if w not in ("_Complex", "complex")]
        if rest == ["float"]:
            return ("complex", 64)
        if rest == ["double"]:
            return ("complex", 128)
        return None
    if words == ("long", "double"):
        return ("float", 128)
    if len(words) == 1:
        return _NAMED.get(words[0])
    return None
