"""The ABI is declared once, in the C headers; every mirror is checked against them.

- ``tilejit.abi`` (every constant Python uses) against the values the C compiler sees;
- the ctypes structures (``tilejit.backends.ctypes_abi``, each naming its C type in
  ``_c_name_``) against the compiler's sizes and field offsets;
- the Cython declarations (``wrapper/*.pxd``) against the headers they mirror: the same
  functions with the same number of parameters, the same enum members, and the same
  struct fields in the same order, nothing missing and nothing extra;
- the version: one source (``tilejit/version.py``, which pyproject.toml reads), equal to
  the core's ``TJ_VERSION``.

One C program prints everything the first two need, compiled once per session.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tilejit import abi
from tilejit.backends import ctypes_abi

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "core" / "include"
PXDS = ("core.pxd", "dlpack.pxd", "layout.pxd")


def _pxd_sections() -> dict[str, str]:
    """``{header: the declarations of every `cdef extern from "<dir>/<header>"` block}``
    over the wrapper's .pxd files, keyed by the header's path under core/include
    (``tilejit/core.h``, ``dlpack/dlpack.h``)."""
    sections: dict[str, str] = {}
    for pxd in PXDS:
        text = (ROOT / "wrapper" / pxd).read_text()
        parts = re.split(r'^cdef extern from "((?:tilejit|dlpack)/\w+\.h)".*\n', text,
                         flags=re.MULTILINE)
        for header, body in zip(parts[1::2], parts[2::2]):
            sections[header] = sections.get(header, "") + body
    return sections


MIRRORS = {header: "wrapper/*.pxd" for header in abi.HEADERS}


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
             '#include "tilejit/layout.h"', "int main(void) {"]
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
    assert not wrong, f"tilejit.abi differs from the C compiler: {wrong}"


def test_status_exceptions_are_the_core_table():
    assert abi.STATUS_EXCEPTIONS[abi.TJ_ETYPE] == "TypeError"
    assert abi.STATUS_EXCEPTIONS[abi.TJ_EVALUE] == "ValueError"
    assert abi.STATUS_EXCEPTIONS[abi.TJ_EPYERR] == ""


def test_ctypes_structures_match_the_c_layout(c_facts):
    structures = _structures()
    assert {cls._c_name_ for cls in structures} >= {
        "DLTensor", "DLDevice", "DLDataType", "tj_host", "tj_producer", "tj_host_plan",
        "tj_host_type"}
    wrong = []
    for cls in structures:
        c = cls._c_name_
        if int(c_facts[f"sizeof:{c}"]) != ctypes.sizeof(cls):
            wrong.append(f"sizeof({c}): C {c_facts[f'sizeof:{c}']}, ctypes {ctypes.sizeof(cls)}")
        for field, *_ in cls._fields_:
            ours = getattr(cls, field).offset
            theirs = int(c_facts[f"offsetof:{c}.{field}"])
            if ours != theirs:
                wrong.append(f"offsetof({c}, {field}): C {theirs}, ctypes {ours}")
    assert not wrong, "\n".join(wrong)


# ---- The .pxd files against the headers ---------------------------------------------

def _strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//.*", "", text)


def _header_facts(text: str) -> tuple[dict, dict, set]:
    """Functions (name -> parameter count), structs (name -> field names) and enum
    members declared by a header."""
    text = _strip_c_comments(text)
    functions = {}
    for match in re.finditer(r"^[\w \*]*?\b(tj_\w+)\(([^;{]*?)\)\s*(?:__attribute__.*?)?;",
                             text, re.MULTILINE | re.DOTALL):
        if match.group(0).lstrip().startswith(("typedef", "return")):
            continue
        params = match.group(2).strip()
        functions[match.group(1)] = 0 if params in ("", "void") else params.count(",") + 1
    structs = {}
    for match in re.finditer(r"typedef struct \w*\s*\{", text):
        body, end = _braced(text, match.end())
        name = re.match(r"\s*(\w+)\s*;", text[end:]).group(1)
        fields = []
        for line in _top_level(body).split(";"):
            line = line.strip()
            if not line:
                continue
            pointer = re.search(r"\(\*(\w+)\)", line)
            fields.append(pointer.group(1) if pointer else
                          re.search(r"(\w+)\s*(?:\[[^\]]*\])*$", line).group(1))
        structs[name] = fields
    enums = set(re.findall(r"X\((TJ_\w+),", text))  # the status X-macro
    for body in re.findall(r"typedef enum \w*\s*\{(.*?)\}", text, re.DOTALL):
        enums.update(re.findall(r"^\s*(\w+)\s*=", body, re.MULTILINE))
    return functions, structs, enums


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


def _pxd_facts(text: str) -> tuple[dict, dict, set]:
    text = re.sub(r"#.*", "", text)
    functions = {}
    for match in re.finditer(r"^    [\w \*]*?\b(tj_\w+)\(([^)]*?)\)", text, re.MULTILINE | re.DOTALL):
        params = match.group(2).strip()
        functions[match.group(1)] = 0 if not params else params.count(",") + 1
    structs = {}
    for match in re.finditer(r"^    ctypedef (?:struct|union) (\w+):\n((?:        .*\n)+)", text,
                             re.MULTILINE):
        fields = []
        for line in match.group(2).splitlines():
            cname = re.search(r"\(\*\w+ \"(\w+)\"\)", line)
            pointer = re.search(r"\(\*(\w+)\)", line)
            plain = re.search(r"(\w+)\s*(?:\[[^\]]*\])*$", line.strip())
            fields.append(cname.group(1) if cname else pointer.group(1) if pointer
                          else plain.group(1))
        structs[match.group(1)] = fields
    enums = set()
    for body in re.findall(r"ctypedef enum \w+:\n((?:        .*\n)+)", text):
        enums.update(body.split())
    return functions, structs, enums


@pytest.mark.parametrize("header", sorted(MIRRORS))
def test_pxd_mirrors_its_header(header):
    h_functions, h_structs, h_enums = _header_facts((INCLUDE / header).read_text())
    p_functions, p_structs, p_enums = _pxd_facts(_pxd_sections().get(header, ""))
    problems = []
    for name in sorted(set(h_functions) | set(p_functions)):
        if name not in p_functions:
            problems.append(f"{name}: in {header}, missing from {MIRRORS[header]}")
        elif name not in h_functions:
            problems.append(f"{name}: in {MIRRORS[header]}, not in {header}")
        elif h_functions[name] != p_functions[name]:
            problems.append(f"{name}: {h_functions[name]} parameters in {header}, "
                            f"{p_functions[name]} in {MIRRORS[header]}")
    for name, fields in h_structs.items():
        if name in p_structs and p_structs[name] != fields:
            problems.append(f"struct {name}: fields {fields} in {header}, "
                            f"{p_structs[name]} in {MIRRORS[header]}")
        elif name not in p_structs:
            problems.append(f"struct {name}: missing from {MIRRORS[header]}")
    problems += [f"enum member {e}: missing from {MIRRORS[header]}" for e in h_enums - p_enums]
    problems += [f"enum member {e}: not in {header}" for e in p_enums - h_enums]
    assert not problems, "\n".join(problems)


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
    from tilejit._build import build_tools
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
