"""The C core as a C library: what its shared library exports, and its public headers.

- Only the functions the headers mark ``TJ_API`` are exported, from both builds of the
  library (``make -C core lib`` and ``build_tools.core_build``): every one of them, no
  ``tj__`` internal, nothing else.
- The headers compile with ``-Wall -Wextra -Werror`` each on its own, and next to
  DLPack's own ``dlpack/dlpack.h`` included before or after them, in C and in C++.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "core"
INCLUDE = CORE / "include"
PUBLIC_HEADERS = sorted(p.name for p in (INCLUDE / "tilejit").glob("*.h"))

# Symbols a linker may define in any shared library.
_LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//.*", "", text)


def public_functions() -> set[str]:
    """Every function a public header declares with TJ_API."""
    names = set()
    for header in PUBLIC_HEADERS:
        text = _strip_comments((INCLUDE / "tilejit" / header).read_text())
        names.update(re.findall(r"\bTJ_API\b[^;(]*?\b(tj_\w+)\s*\(", text))
    return names


def _exported(library: Path) -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    done = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True,
                          text=True, check=True)
    return {line.split()[-1] for line in done.stdout.splitlines() if line.strip()}


def _check_exports(library: Path) -> None:
    exported = _exported(library) - _LINKER_SYMBOLS
    public = public_functions()
    assert len(public) > 50  # the parser found the declarations
    internal = sorted(name for name in exported if name.startswith("tj__"))
    assert not internal, f"{library.name} exports internal functions: {internal}"
    assert not exported - public, f"exported, not TJ_API: {sorted(exported - public)}"
    assert not public - exported, f"TJ_API, not exported: {sorted(public - exported)}"


def test_the_makefile_library_exports_the_public_api_only(tmp_path):
    if shutil.which("make") is None:
        pytest.fail("make is required to build the core")
    build = tmp_path / "build"
    done = subprocess.run(["make", "-C", str(CORE), "lib", f"BUILD={build}", "DLPACK_REF="],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    _check_exports(build / "libtilejit_core.so")


def test_the_runtime_library_exports_the_public_api_only():
    # This checkout's build_tools (the repository root is first on sys.path), building
    # this checkout's core into the session's cache.
    core_build = importlib.import_module("build_tools.core_build")
    _check_exports(core_build.build_core_library(core_dir=CORE))


def _compile(tmp_path: Path, name: str, source: str, compiler: str, std: str) -> None:
    path = tmp_path / name
    path.write_text(source)
    done = subprocess.run([compiler, f"-std={std}", "-Wall", "-Wextra", "-Werror",
                           "-fsyntax-only", f"-I{INCLUDE}", str(path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{name}:\n{source}\n{done.stderr}"


_COMPILERS = [("cc", "gnu11", "c"), ("c++", "gnu++17", "cc")]


@pytest.mark.parametrize("compiler,std,suffix", _COMPILERS, ids=["c", "c++"])
@pytest.mark.parametrize("order", ["dlpack_first", "tilejit_first"])
def test_tilejit_h_compiles_beside_dlpack_h(tmp_path, compiler, std, suffix, order):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    includes = ['#include "dlpack/dlpack.h"', '#include "tilejit/tilejit.h"']
    if order == "tilejit_first":
        includes.reverse()
    source = "\n".join([*includes, "",
                        "int call(const DLTensor *tensor);",
                        "int call(const DLTensor *tensor) {",
                        "  tj_arg arg;",
                        "  tj_arg_from_dltensor(&arg, tensor, 0);",
                        "  tj_arg_release(&arg);",
                        "  return DLPACK_MAJOR_VERSION == TJ_DLPACK_MAJOR ? 0 : 1;",
                        "}", ""])
    _compile(tmp_path, f"{order}.{suffix}", source, compiler, std)


@pytest.mark.parametrize("header", PUBLIC_HEADERS)
def test_each_public_header_compiles_alone(tmp_path, header):
    _compile(tmp_path, "alone.c", f'#include "tilejit/{header}"\n', "cc", "gnu11")


# Names of the language bindings (producer.h, host.h) an embedder of core.h never sees.
_BINDING_NAMES = ("TJ_EPYERR", "TJ_ECLAIMED", "TJ_ARG_OBJECT", "TJ_PRODUCER_IMPORT",
                  "tj_producer_step", "tj_binding_status", "tj_call_binding",
                  "tj_call_run_binding", "tj_host", "tj_producer", "tj_claim",
                  "tj_arg_object")


def test_core_h_declares_no_binding_concept(tmp_path):
    # Each name is free to declare again after core.h alone, and declared by tilejit.h.
    free = "\n".join(f"int {name} = 0;" for name in _BINDING_NAMES)
    _compile(tmp_path, "embedder.c", f'#include "tilejit/core.h"\n{free}\n', "cc", "gnu11")
    for name in _BINDING_NAMES:
        taken = f'#include "tilejit/tilejit.h"\nint {name} = 0;\n'
        path = tmp_path / "binding.c"
        path.write_text(taken)
        done = subprocess.run(["cc", "-std=gnu11", "-fsyntax-only", f"-I{INCLUDE}", str(path)],
                              capture_output=True, text=True, check=False)
        assert done.returncode != 0, f"{name} is not declared by tilejit/tilejit.h"


# ---- The core's sources are layered ---------------------------------------------------

SRC = CORE / "src"


def _code(path: Path) -> str:
    """A C file without comments, string and character literals."""
    text = _strip_comments(path.read_text())
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)


def _braced_body(text: str, start: int) -> str:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    raise ValueError("unbalanced braces")


_DEFINITION = re.compile(r"^(static\s+)?(?:[A-Za-z_][\w \*]*?)\b(tj_\w+)\s*\([^;{}]*\)\s*\{",
                         re.MULTILINE)
_NAME = re.compile(r"\b(tj_\w+)\b")


def source_graph() -> dict[str, set[str]]:
    """``{file.c: the other .c files whose functions it calls or takes the address of}``.

    A function the core defines in a .c file belongs to that file; a static inline
    function of a header belongs to every file that uses it (its calls count as theirs)."""
    owner: dict[str, str] = {}
    for path in sorted(SRC.glob("*.c")):
        for match in _DEFINITION.finditer(_code(path)):
            if not match.group(1):
                owner[match.group(2)] = path.name
    inline: dict[str, set[str]] = {}
    for path in sorted(SRC.glob("*.h")):
        code = _code(path)
        for match in _DEFINITION.finditer(code):
            if match.group(1):
                body = _braced_body(code, match.end() - 1)
                inline[match.group(2)] = set(_NAME.findall(body)) - {match.group(2)}
    graph = {}
    for path in sorted(SRC.glob("*.c")):
        used, todo = set(), list(_NAME.findall(_code(path)))
        while todo:
            name = todo.pop()
            if name not in used:
                used.add(name)
                todo.extend(inline.get(name, ()))
        graph[path.name] = {owner[name] for name in used if owner.get(name, path.name) != path.name}
    return graph


def include_graph() -> dict[str, set[str]]:
    """``{file: the core's own src/ headers it includes}``."""
    return {path.name: set(re.findall(r'^#include "(\w+\.h)"', path.read_text(), re.MULTILINE))
            & {h.name for h in SRC.glob("*.h")}
            for path in sorted([*SRC.glob("*.c"), *SRC.glob("*.h")])}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of `graph` as a path (first == last), or [] when it has none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a.c": {"b.c"}, "b.c": {"c.c"}, "c.c": {"a.c"}}) == \
        ["a.c", "b.c", "c.c", "a.c"]
    assert _cycle({"a.c": {"b.c"}, "b.c": set(), "c.c": {"a.c", "b.c"}}) == []


def test_core_sources_call_each_other_without_cycles():
    graph = source_graph()
    assert graph["call.c"] >= {"validate.c", "launch.c", "memo.c"}  # the parser sees calls
    cycle = _cycle(graph)
    assert not cycle, "core/src files depend on each other in a cycle: " + " -> ".join(cycle)


def test_core_headers_include_each_other_without_cycles():
    cycle = _cycle(include_graph())
    assert not cycle, "core/src headers include each other in a cycle: " + " -> ".join(cycle)
