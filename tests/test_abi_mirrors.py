"""The ABI is declared once, in the C headers; every mirror is checked against them, by
type, and holds only what its binding uses.

- ``tilejit.native.abi`` (every constant Python uses) against the values the C compiler sees;
- the ctypes structures (``tilejit.native.ctypes_abi``, each naming its C type in
  ``_c_name_``): every field of the C struct, in order, with the compiler's offsets and
  sizes; and the ctypes prototypes (``tilejit.native.library``) against the headers'
  parameter and return types;
- the Cython declarations (``wrapper/*.pxd``): a C file made from them, compiled against
  the headers, asserts that each struct field, function, function-pointer typedef and
  constant has the header's type (``__builtin_types_compatible_p``), that a struct's
  fields come in the header's order, and that each enum member exists;
- that every name a mirror declares is used: a .pxd declaration by the wrapper
  (``wrapper/*.pyx``, ``*.pxi``, or another declaration it uses), a ctypes structure or
  prototype by tilejit or the tests;
- the version: one source (``tilejit/version.py``, which pyproject.toml reads), equal to
  the core's ``TJ_VERSION`` and to what the library says (``tj_version``).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tilejit.native import abi, ctypes_abi

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "core" / "include"
PXDS = ("core.pxd", "dlpack.pxd", "layout.pxd")


def _structures():
    return [cls for cls in vars(ctypes_abi).values()
            if isinstance(cls, type) and issubclass(cls, (ctypes.Structure, ctypes.Union))
            and "_c_name_" in vars(cls)]


def _c_field(name: str) -> str:
    return name.rstrip("_")  # `import_` stands for C's `import`, a Python keyword


@pytest.fixture(scope="module")
def c_facts(tmp_path_factory) -> dict[str, str]:
    """``{key: value}`` printed by a program compiled against the headers."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "tilejit/tilejit.h"',
             '#include "tilejit/layout.h"', '#include "tilejit/xla.h"',
             '#include "tilejit/torch.h"', "int main(void) {"]
    for name in abi.NAMES:
        if isinstance(getattr(abi, name), str):
            lines.append(f'  printf("{name} %s\\n", {name});')
        else:
            lines.append(f'  printf("{name} %lld\\n", (long long)({name}));')
    for cls in _structures():
        c = cls._c_name_
        lines.append(f'  printf("sizeof:{c} %zu\\n", sizeof({c}));')
        for field, *_ in cls._fields_:
            lines.append(f'  printf("offsetof:{c}.{field} %zu\\n", '
                         f'offsetof({c}, {_c_field(field)}));')
            lines.append(f'  printf("sizeof:{c}.{field} %zu\\n", '
                         f'sizeof((({c} *)0)->{_c_field(field)}));')
    lines.append("  return 0;\n}")
    work = tmp_path_factory.mktemp("abi")
    (work / "facts.c").write_text("\n".join(lines))
    cc = shutil.which("cc") or shutil.which("gcc")
    done = subprocess.run([cc, "-std=gnu11", f"-I{INCLUDE}", str(work / "facts.c"), "-o",
                           str(work / "facts")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    out = subprocess.run([str(work / "facts")], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def test_python_constants_equal_the_compilers(c_facts):
    assert len(abi.NAMES) > 80  # the parser found the headers' constants
    wrong = {name: (getattr(abi, name), c_facts[name]) for name in abi.NAMES
             if str(getattr(abi, name)) != c_facts[name]}
    assert not wrong, f"tilejit.native.abi differs from the C compiler: {wrong}"


def test_status_exceptions_are_the_core_table():
    assert abi.STATUS_EXCEPTIONS[abi.TJ_ETYPE] == "TypeError"
    assert abi.STATUS_EXCEPTIONS[abi.TJ_EVALUE] == "ValueError"
    assert abi.STATUS_EXCEPTIONS[abi.TJ_EPYERR] == ""


def _strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//.*", "", text)


def _split_params(params: str) -> list[str]:
    """A parameter list split at its top-level commas."""
    parts, depth, current = [], 0, ""
    for ch in params:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip() not in ("", "void"):
        parts.append(current.strip())
    return parts


def _header_facts(text: str) -> tuple[dict, dict]:
    """Functions (name -> (return type, [parameter declarations])) and structs (name ->
    field names) declared by a header."""
    text = _strip_c_comments(text)
    functions = {}
    for match in re.finditer(r"^\s*(?:TJ_API\s+)?([\w \*]*?)\b(tj_\w+)\(([^;{]*?)\)\s*"
                             r"(?:__attribute__.*?)?;", text, re.MULTILINE | re.DOTALL):
        if match.group(0).lstrip().startswith(("typedef", "return", "static")):
            continue
        returns = re.sub(r"\bTJ_API\b", "", match.group(1)).strip()
        functions[match.group(2)] = (returns, _split_params(match.group(3)))
    structs = {}
    for match in re.finditer(r"(?:typedef )?struct (\w*)\s*\{", text):
        body, end = _braced(text, match.end())
        after = re.match(r"\s*(\w+)\s*;", text[end:])
        name = after.group(1) if after else match.group(1)
        fields = []
        for line in _top_level(body).split(";"):
            line = line.strip()
            if not line:
                continue
            pointer = re.search(r"\(\*(\w+)\)", line)
            fields.append(pointer.group(1) if pointer else
                          re.search(r"(\w+)\s*(?:\[[^\]]*\])*$", line).group(1))
        structs[name] = fields
    return functions, structs


def _braced(text: str, start: int) -> tuple[str, int]:
    """The text up to the brace closing the one opened before ``start``, and the index
    after it."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i], i + 1
    raise ValueError("unbalanced braces")


def _top_level(body: str) -> str:
    """A struct body with nested braces (an anonymous union's members) removed."""
    while "{" in body:
        start = body.index("{")
        _, end = _braced(body, start + 1)
        body = body[:start] + body[end:]
    return body


def _all_header_facts() -> tuple[dict, dict]:
    functions, structs = {}, {}
    for header in abi.HEADERS:
        f, st = _header_facts((INCLUDE / header).read_text())
        functions.update(f)
        structs.update(st)
    return functions, structs


# ---- The ctypes mirrors -----------------------------------------------------------------


def test_ctypes_structures_match_the_c_layout(c_facts):
    structures = _structures()
    assert {cls._c_name_ for cls in structures} >= {
        "DLTensor", "DLDevice", "DLDataType", "tj_host", "tj_producer", "tj_host_plan",
        "tj_host_type", "tj_torch_plain", "tj_torch_plain_objects", "tj_torch_reader",
        "tj_torch_op", "tj_xla_call_frame"}
    _, structs = _all_header_facts()
    wrong = []
    for cls in structures:
        c = cls._c_name_
        ours = [_c_field(field) for field, *_ in cls._fields_]
        if ours != structs[c]:
            wrong.append(f"{c}: fields {structs[c]} in the header, {ours} in ctypes")
        if int(c_facts[f"sizeof:{c}"]) != ctypes.sizeof(cls):
            wrong.append(f"sizeof({c}): C {c_facts[f'sizeof:{c}']}, ctypes {ctypes.sizeof(cls)}")
        for field, *_ in cls._fields_:
            mine = getattr(cls, field)
            for what, value in (("offsetof", mine.offset), ("sizeof", mine.size)):
                theirs = int(c_facts[f"{what}:{c}.{field}"])
                if value != theirs:
                    wrong.append(f"{what}({c}.{field}): C {theirs}, ctypes {value}")
    assert not wrong, "\n".join(wrong)


def test_the_core_is_mirrored_in_native_only():
    # Every ctypes mirror of a core structure is in tilejit/native/ctypes_abi.py and every
    # core function's prototype in tilejit/native/library.py, where the tests above check
    # them against the headers; elsewhere ctypes describes only CPython's own structures.
    import ast

    package = ROOT / "tilejit"
    prototypes, structures = [], {}
    for path in sorted(package.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if (isinstance(node, ast.Attribute) and node.attr in ("restype", "argtypes")
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr.startswith("tj_")
                    and name != "tilejit/native/library.py"):
                prototypes.append(f"{name}: {node.value.attr}")
            if isinstance(node, ast.ClassDef) and name != "tilejit/native/ctypes_abi.py" and any(
                    ast.unparse(base).endswith(("Structure", "Union")) for base in node.bases):
                structures.setdefault(name, set()).add(node.name)
    assert prototypes == []
    # runtime/binding.py's: PyMethodDef, PyType_Slot, PyType_Spec, PyMemberDef.
    assert structures == {"tilejit/runtime/binding.py": {
        "_MethodDef", "_TypeSlot", "_TypeSpec", "_MemberDef"}}


def _python_sources(*exclude: Path) -> str:
    paths = [*(ROOT / "tilejit").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    return "\n".join(p.read_text() for p in paths if p.resolve() not in exclude)


def test_every_ctypes_mirror_is_used():
    from tilejit.native import library as core

    text = _python_sources(Path(ctypes_abi.__file__).resolve(), Path(__file__).resolve())
    unused = [cls.__name__ for cls in _structures()
              if not re.search(rf"\b{cls.__name__}\b", text)]
    unused += [name for name in core._PROTOTYPES if not re.search(rf"\.{name}\b", text)]
    assert not unused, f"declared in a ctypes mirror, used nowhere: {unused}"


_C_SCALARS = {"int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
              "uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64,
              "intptr_t": ctypes.c_ssize_t, "size_t": ctypes.c_size_t, "void": None}


def _ctypes_for(declaration: str) -> set:
    """The ctypes types that stand for a C parameter (or return) type: the exact scalar
    or struct, ``c_char_p`` for strings, a typed pointer (or ``c_void_p``) for pointers,
    a pointer to a typed pointer (or to ``c_void_p``) for an array handed back."""
    text = re.sub(r"\bconst\b", "", declaration)
    pointers = text.count("*") + text.count("[")
    text = re.sub(r"\[[^\]]*\]", "", text).replace("*", " ")
    base = text.split()[0]
    by_name = {cls._c_name_: cls for cls in _structures()}
    if pointers == 0:
        return {_C_SCALARS.get(base, by_name.get(base, "?"))}
    if pointers == 1 and base == "char":
        return {ctypes.c_char_p}
    if pointers == 1 and base in by_name:
        return {ctypes.POINTER(by_name[base]), ctypes.c_void_p}
    if pointers == 1 and base in _C_SCALARS and base != "void":
        return {ctypes.POINTER(_C_SCALARS[base]), ctypes.c_void_p}
    if pointers == 2 and base == "char":  # a string handed back
        return {ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p)}
    if pointers == 2 and base in by_name:  # a struct array handed back
        return {ctypes.POINTER(ctypes.POINTER(by_name[base])), ctypes.POINTER(ctypes.c_void_p)}
    if pointers == 2 and base in _C_SCALARS and base != "void":
        return {ctypes.POINTER(ctypes.POINTER(_C_SCALARS[base])),
                ctypes.POINTER(ctypes.c_void_p)}
    if pointers == 2:
        return {ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p}
    return {ctypes.c_void_p}


def test_ctypes_prototypes_match_the_headers():
    from tilejit.native import library as core

    functions, _ = _all_header_facts()
    assert len(functions) > 50  # the parser found the declarations
    wrong = []
    for name, (restype, argtypes) in core._PROTOTYPES.items():
        if name not in functions:
            wrong.append(f"{name}: no such function in the headers")
            continue
        c_return, c_params = functions[name]
        if restype not in _ctypes_for(c_return):
            wrong.append(f"{name}: returns {c_return}, ctypes says {restype}")
        if len(argtypes) != len(c_params):
            wrong.append(f"{name}: {len(c_params)} parameters, ctypes says {len(argtypes)}")
            continue
        for i, (ours, theirs) in enumerate(zip(argtypes, c_params)):
            if ours not in _ctypes_for(theirs):
                wrong.append(f"{name}: parameter {i} is '{theirs}', ctypes says {ours}")
    assert not wrong, "\n".join(wrong)


# ---- The .pxd files against the headers ---------------------------------------------


def _pxd_declarations() -> list[dict]:
    """Every declaration of the wrapper's .pxd files' `cdef extern from` blocks: kind
    (const, member, enum, struct, function, typedef), name, and its C text (``decl``:
    the declaration in C; ``fields``: a struct's ``(C name, C declaration)``)."""
    found = []
    for pxd in PXDS:
        text = re.sub(r"#.*", "", (ROOT / "wrapper" / pxd).read_text())
        for block in re.split(r"^cdef extern from .*:\n", text, flags=re.MULTILINE)[1:]:
            block = block.split("\n\n\ncdef ")[0]
            found += _block_declarations(_joined(block))
    return found


def _joined(block: str) -> list[str]:
    """The block's lines, a declaration continued over lines (open parentheses) joined."""
    lines, pending = [], ""
    for line in block.splitlines():
        if not line.strip() or not line.startswith("    "):
            continue
        pending = f"{pending} {line.strip()}" if pending else line.rstrip()
        if pending.count("(") == pending.count(")"):
            lines.append(pending)
            pending = ""
    return lines


def _c_text(cython: str) -> str:
    """A Cython declaration as C: no `noexcept`, C names for renamed fields, `object`
    results as the `void *` they are in C."""
    text = re.sub(r"\bnoexcept\b", "", cython)
    text = re.sub(r"\b\w+ \"(\w+)\"", r"\1", text)
    text = re.sub(r"\(\s*\)", "(void)", text)  # no parameters, as Cython means it
    return re.sub(r"^object\b", "void *", text.strip())


def _declared_name(c: str) -> str:
    pointer = re.search(r"\(\*(\w+)\)", c)
    if pointer:
        return pointer.group(1)
    return re.search(r"(\w+)\s*(?:\[[^\]]*\])*$", c).group(1)


def _python_name(field: str) -> str:
    """The name the wrapper's code gives a field (``import_`` for C's ``import``)."""
    renamed = re.search(r"\b(\w+) \"\w+\"", field)
    return renamed.group(1) if renamed else _declared_name(_c_text(field))


def _block_declarations(lines: list[str]) -> list[dict]:
    found: list[dict] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        body = []
        while i + 1 < len(lines) and lines[i + 1].startswith("        "):
            i += 1
            body.append(lines[i].strip())
        i += 1
        if line.startswith("enum:"):
            members = line[len("enum:"):].split() + body
            found += [{"kind": "member", "name": m} for m in members]
        elif line.startswith("ctypedef enum"):
            name = line.split()[2].rstrip(":")
            found.append({"kind": "enum", "name": name})
            found += [{"kind": "member", "name": m, "type": name} for m in body]
        elif line.startswith("ctypedef struct"):
            name = line.split()[2].rstrip(":")
            if not line.endswith(":"):
                continue  # a forward declaration; the struct is declared below
            fields = [(_declared_name(_c_text(f)), _c_text(f), _python_name(f))
                      for f in body if f != "pass"]
            found.append({"kind": "struct", "name": name, "fields": fields,
                          "uses": " ".join(body)})
        elif line.startswith("ctypedef"):
            c = _c_text(line[len("ctypedef"):])
            found.append({"kind": "typedef", "name": _declared_name(c), "decl": c})
        elif "(" in line:
            name = re.match(r"[\w \*]*?\b(\w+)\(", line).group(1)
            found.append({"kind": "function", "name": name, "decl": _c_text(line)})
        else:
            c = _c_text(line)
            found.append({"kind": "const", "name": _declared_name(c), "decl": c})
    return found


def _pxd_check_program(declarations: list[dict]) -> str:
    """C asserting every .pxd declaration against the headers, each failure naming it."""
    out = ['#include <stddef.h>', '#include "tilejit/tilejit.h"', '#include "tilejit/layout.h"']

    def same(what: str, ours: str, theirs: str) -> None:
        out.append(f"_Static_assert(__builtin_types_compatible_p({theirs}, {ours}), "
                   f'"{what}: the .pxd type differs from the header\'s");')

    for n, d in enumerate(declarations):
        name, tag = d["name"], f"pxd_{n}"
        if d["kind"] == "member":
            out.append(f"enum {{ {tag} = {name} }};")
        elif d["kind"] == "enum":
            out.append(f"typedef {name} {tag};")
        elif d["kind"] == "typedef":
            out.append("typedef " + re.sub(rf"\b{name}\b", tag, d["decl"], count=1) + ";")
            same(name, tag, name)
        elif d["kind"] == "function":
            out.append("typedef " + re.sub(rf"\b{name}\(", f"({tag})(", d["decl"]) + ";")
            same(name, tag, f"__typeof__({name})")
        elif d["kind"] == "const":
            if "*" in d["decl"]:  # a string: assignable as declared
                out.append(f"static {re.sub(rf'{name}$', tag, d['decl'])} "
                           f"__attribute__((unused)) = {name};")
            else:
                out.append("typedef " + re.sub(rf"\b{name}$", tag, d["decl"]) + ";")
                same(name, tag, f"__typeof__({name})")
        else:
            out.append(f"typedef {name} {tag};")
            previous = None
            for field, decl, _ in d["fields"]:
                field_tag = f"{tag}_{field}"
                out.append("typedef " + re.sub(rf"\b{field}\b", field_tag, decl, count=1) + ";")
                same(f"{name}.{field}", field_tag, f"__typeof__((({name} *)0)->{field})")
                if previous is not None:
                    out.append(f"_Static_assert(offsetof({name}, {previous}) < "
                               f'offsetof({name}, {field}), "{name}.{field}: after '
                               f'{previous} in the .pxd, before it in the header");')
                previous = field
    return "\n".join(out) + "\n"


def test_pxd_declarations_have_the_headers_types(tmp_path):
    declarations = _pxd_declarations()
    kinds = {kind: sum(d["kind"] == kind for d in declarations)
             for kind in ("const", "member", "enum", "struct", "function", "typedef")}
    assert kinds["function"] > 15 and kinds["struct"] > 8 and kinds["typedef"] >= 5, kinds
    path = tmp_path / "pxd_check.c"
    path.write_text(_pxd_check_program(declarations))
    cc = shutil.which("cc") or shutil.which("gcc")
    done = subprocess.run([cc, "-std=gnu11", "-fsyntax-only", "-Wall", "-Werror", f"-I{INCLUDE}",
                           str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-6000:]


def test_the_pxd_check_catches_a_wrong_type(tmp_path):
    # The check itself: a field, a parameter and a field order the header does not have.
    wrong = [
        {"kind": "struct", "name": "tj_arg", "fields": [("flags", "int64_t flags", "")]},
        {"kind": "function", "name": "tj_arg_init", "decl": "void tj_arg_init(int *arg)"},
        {"kind": "function", "name": "tj_last_error", "decl": _c_text("const char *tj_last_error(int)")},
        {"kind": "struct", "name": "DLTensor",
         "fields": [("ndim", "int32_t ndim", ""), ("data", "void *data", "")]},
    ]
    cc = shutil.which("cc") or shutil.which("gcc")
    for n, declaration in enumerate(wrong):
        path = tmp_path / f"wrong_{n}.c"
        path.write_text(_pxd_check_program([declaration]))
        done = subprocess.run([cc, "-std=gnu11", "-fsyntax-only", f"-I{INCLUDE}", str(path)],
                              capture_output=True, text=True, check=False)
        assert done.returncode != 0, declaration


def test_every_pxd_declaration_is_used():
    # Used: named by the wrapper's code (wrapper/*.pyx, *.pxi), or by a declaration that
    # is (a struct's field types, a function's parameter types). A struct field: read or
    # written by the wrapper's code.
    code = "\n".join(re.sub(r"#.*", "", p.read_text())
                     for p in sorted((ROOT / "wrapper").glob("*.p[yx][xi]")))
    tokens = set(re.findall(r"\w+", code))
    declarations = _pxd_declarations()
    used = {d["name"] for d in declarations if d["name"] in tokens}
    while True:
        texts = " ".join(d.get("decl", "") + d.get("uses", "") for d in declarations
                         if d["name"] in used)
        more = {d["name"] for d in declarations if re.search(rf"\b{d['name']}\b", texts)}
        if more <= used:
            break
        used |= more
    unused = sorted(d["name"] for d in declarations if d["name"] not in used)
    for d in declarations:
        if d["kind"] == "struct":
            unused += [f"{d['name']}.{field}" for field, _, name in d["fields"]
                       if not re.search(rf"\.{name}\b", code)]
    assert not unused, f"declared in wrapper/*.pxd, used by no wrapper code: {unused}"


def test_one_version():
    from tilejit import __version__
    from tilejit.version import VERSION

    assert __version__ == VERSION == abi.TJ_VERSION
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = {attr = "tilejit.version.VERSION"}' in pyproject


def test_the_library_states_its_version():
    # tj_version and tj_version_string, read through ctypes from the core the package
    # loads: the same version as the package's, number and string.
    from tilejit.native._build import build_tools
    from tilejit.version import VERSION

    path, _ = build_tools.load_core_library()
    lib = ctypes.CDLL(str(path))  # a handle of its own: the package's prototypes stay
    lib.tj_version.restype, lib.tj_version.argtypes = ctypes.c_int32, []
    lib.tj_version_string.restype, lib.tj_version_string.argtypes = ctypes.c_char_p, []
    major, minor, patch = (int(part) for part in VERSION.split("."))
    assert lib.tj_version() == major * 10000 + minor * 100 + patch
    assert lib.tj_version_string().decode() == VERSION
    assert (abi.TJ_VERSION_MAJOR, abi.TJ_VERSION_MINOR, abi.TJ_VERSION_PATCH) == (
        major, minor, patch)
