"""Layering you can see: no import cycles inside tilejit or inside build_tools, build_tools
never imports tilejit, one core per process whichever backends run, and one options record
for every jit.

The import graph is read from the sources (module-level and function-level imports alike),
not from what happens to be imported, so a cycle hidden in a function body fails too.
"""

from __future__ import annotations

import ast
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import tilejit
from tilejit import T
from tilejit.builder.signature import lower

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "tilejit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path) -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(package.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *filter(None, [base])])
            # `from . import x` imports the submodule x when there is one, else a name of
            # the package itself.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` names a.b.c; the edge goes to the deepest module we know.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package at `package` that it imports anywhere."""
    modules = _modules(package)
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # Every module imports the package's __init__ implicitly (Python runs it first); only
    # the imports a module writes count, so edges into the package itself are dropped.
    for targets in graph.values():
        targets.discard(_module_name(package / "__init__.py"))
    return graph


def test_no_import_cycles_in_tilejit():
    assert _cycles(_import_graph(PACKAGE)) == []


def _floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 1 for a module importing none of the package, else one above
    the highest module it imports (the graph has no cycles)."""
    floors: dict[str, int] = {}

    def floor(name: str) -> int:
        if name not in floors:
            floors[name] = 1 + max((floor(t) for t in graph[name]), default=0)
        return floors[name]

    for name in graph:
        floor(name)
    return floors


def test_the_package_has_at_most_eleven_import_floors():
    # The longest chain of imports (function-level ones counted) from a module down to one
    # that imports nothing of the package: a change that stacks a module on the tallest
    # pile says so here, so that a new layer is a decision. The eleventh: autotune over
    # @jit (runtime.autotune -> runtime.jit), as its decorator stacks on jit's.
    floors = _floors(_import_graph(PACKAGE))
    tallest = max(floors, key=floors.get)
    assert floors[tallest] <= 11, f"{tallest} stands on {floors[tallest]} floors"


def test_floors_count_the_longest_chain():
    assert _floors({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}) == {
        "a": 3, "b": 2, "c": 1, "d": 1}


def test_no_import_cycles_in_build_tools():
    assert _cycles(_import_graph(REPO / "build_tools")) == []


def test_the_cycle_finder_sees_function_level_imports(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .lang import T\n    import tilejit.layout\n")
    assert _imports("tilejit.m", source, {"tilejit.lang", "tilejit.layout"}) == {
        "tilejit.lang", "tilejit.layout"}


def test_build_tools_never_imports_tilejit():
    for path in sorted((REPO / "build_tools").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not [n for n in names if n.split(".")[0] == "tilejit"], (path, names)


# --- one core per process ------------------------------------------------------------------

ONE_CORE_SCRIPT = """\
import json, sys
import numpy as np
import torch
import tilejit
from tilejit import T
from tilejit.builder.signature import lower

n = T.symbol("n")
params = [T.Buffer((n,), "float32", name="A"), T.Buffer((n,), "float32", name="B")]
src = "void twice(float *A, float *B, int64_t n) { for (int64_t i = 0; i < n; ++i) B[i] = 2 * A[i]; }"
results = {}
for backend in ("cython", "dlpack", "ctypes"):
    kernel = tilejit.compile(tilejit.Program("twice", params, src), out_idx=-1,
                             target="cpu", execution_backend=backend)
    results[backend] = kernel(torch.arange(4, dtype=torch.float32)).tolist()
    # A failing call sets the core's error: every backend reads the one error buffer.
    try:
        kernel(torch.zeros(4, dtype=torch.float64))
    except (TypeError, ValueError) as exc:
        results[backend + "-error"] = str(exc)
maps = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if "libtilejit_core" in line})
wrapper = sys.modules["tilejit._tilejit"].__file__
print(json.dumps({"results": results, "maps": maps, "wrapper": wrapper}))
"""


def _dynamic_symbols(path: Path) -> dict[str, bool]:
    """The ELF64 little-endian file's dynamic symbols: name -> defined (st_shndx != 0)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "expected ELF64 LE"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    symbols = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        strtab = sections[link]
        for at in range(offset, offset + size, entsize):
            st_name, _st_info, _st_other, st_shndx = struct.unpack_from("<IBBH", data, at)
            start = strtab[4] + st_name
            name = data[start:data.index(b"\0", start)].decode()
            if name:
                symbols[name] = st_shndx != 0
    return symbols


def test_every_backend_uses_one_core(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("LD_LIBRARY_PATH", None)  # the wrapper must find the core by itself
    done = subprocess.run([sys.executable, "-c", ONE_CORE_SCRIPT], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads(done.stdout.splitlines()[-1])
    results = report["results"]
    assert results["cython"] == results["dlpack"] == results["ctypes"] == [0.0, 2.0, 4.0, 6.0]
    assert results["cython-error"] == results["dlpack-error"] == results["ctypes-error"]
    # One core library file mapped, however many segments it has.
    assert len(report["maps"]) == 1, report["maps"]
    # The wrapper holds no copy of the core: it defines no tj_ symbol and takes every one
    # it calls from the core library.
    symbols = _dynamic_symbols(Path(report["wrapper"]))
    assert symbols.get("PyInit__tilejit") is True
    core_calls = {name for name, defined in symbols.items() if name.startswith("tj_")}
    assert {"tj_host_call", "tj_last_error"} <= core_calls
    assert not [name for name in core_calls if symbols[name]]
    core = _dynamic_symbols(Path(report["maps"][0]))
    assert all(core.get(name) is True for name in core_calls)


# --- one options record for jit and jit(layout=) -------------------------------------------

def _copy_factory(A, B):
    """B = A + TJ_OFFSET (a -D of compile_flags) for 1-d tensors, static or dynamic."""
    proto = lower(tilejit.Program(name="copy", params=[A, B], source=""), None,
                  "cpu").c_prototype
    source = f"""{proto} {{
  for (int64_t i = 0; i < {A.shape[0]}; ++i) B[i] = A[i] + TJ_OFFSET;
}}
"""
    return tilejit.Program(name="copy", params=[A, B], source=source)


@pytest.mark.parametrize("layout", [None, "dynamic", "static"])
def test_jit_options_reach_every_compile(layout, capsys):
    torch = pytest.importorskip("torch")
    options = {"target": "cpu", "compile_flags": ["-DTJ_OFFSET=3"], "verbose": True,
               "execution_backend": "cython"}
    if layout is None:
        n = T.symbol("n")

        @tilejit.jit(**options)
        def factory():
            return _copy_factory(T.Buffer((n,), "float32", name="A"),
                                 T.Buffer((n,), "float32", name="B"))

        kernel = factory()
    else:
        factory = tilejit.jit(layout=layout, **options)(_copy_factory)
    assert factory.options == tilejit.jit(**options)(_copy_factory).options
    a, b = torch.arange(4, dtype=torch.float32), torch.empty(4)
    if layout is None:
        kernel(a, b)
    else:
        factory(a, b)
    assert b.tolist() == [3.0, 4.0, 5.0, 6.0]  # compile_flags reached the compiler
    assert "tilejit: copy: " in capsys.readouterr().err  # and verbose did


@pytest.mark.parametrize("layout", ["dynamic", "static"])
def test_layout_jit_keeps_arch_and_compiler(layout):
    torch = pytest.importorskip("torch")
    factory = tilejit.jit(layout=layout, target="cpu", arch="sm_90", compiler="nvrtc")(
        _copy_factory)
    assert (factory.options.arch, factory.options.compiler) == ("sm_90", "nvrtc")
    # They reach the compile: a CPU target refuses them (silently dropped, it would not).
    with pytest.raises(ValueError, match=r"copy: arch= and compiler= are for target='cuda'"):
        factory(torch.zeros(4), torch.zeros(4))


# --- wings ---------------------------------------------------------------------------------

# The package's wings from the bottom up: a module imports only modules of its own wing or
# of wings below it (function-level imports counted). "" is the package's own __init__, the
# public API; `_build_tools` is the build_tools package as the native wing reaches it.
WINGS = ("version", "native", "language", "builder", "runtime", "frameworks", "", "tilelang",
         "tools", "__main__")


def _wing(module: str) -> str:
    parts = module.split(".")
    wing = parts[1] if len(parts) > 1 else ""
    return "native" if wing == "_build_tools" else wing


def test_wings_import_only_downward():
    modules = _modules(PACKAGE)
    known = set(modules) | {"tilejit._build_tools"}
    upward = []
    for name, path in modules.items():
        for target in _imports(name, path, known):
            if WINGS.index(_wing(target)) > WINGS.index(_wing(name)):
                upward.append(f"{name} -> {target}")
    assert {_wing(name) for name in modules} <= set(WINGS)
    assert upward == []


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_torch_is_imported_by_the_torch_wing_and_the_tools_only():
    # The runtime asks frameworks through their adapters (tilejit.runtime.frameworks); only
    # the torch wing knows torch, and the command-line tools use it as a peer to measure.
    importing = {_module_name(path) for path in PACKAGE.rglob("*.py")
                 if "torch" in _imported_roots(path)}
    assert {m for m in importing if not m.startswith(("tilejit.frameworks.torch.",
                                                       "tilejit.tools."))} == set()
    assert "tilejit.frameworks.torch.adapter" in importing


def test_every_wing_says_what_it_is_for():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 8, init


# --- the kernel's internal interface -------------------------------------------------------


def _kernel_private_names() -> set[str]:
    """The underscore names of JITKernel: its class body's and what its methods set on
    ``self``."""
    tree = ast.parse((PACKAGE / "runtime" / "kernel.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "JITKernel"]
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "self"):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _private_kernel_uses(private: set[str]) -> dict[str, set[str]]:
    """Module -> the kernel's underscore names it reaches on an object other than
    ``self``, outside runtime/kernel.py: as attributes, and as keys of its ``__dict__``
    (``_dict_keys``) that are the kernel's names."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "runtime" / "kernel.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        names = {k for k in _dict_keys(tree) if k in private}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                names.add(node.attr)
            # getattr / setattr / hasattr / delattr with the name as a string
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and node.args[1].value in private):
                names.add(node.args[1].value)
        if names:
            found[_module_name(path)] = names
    return found


def _is_dict_of(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "__dict__"


def _dict_keys(tree) -> set[str]:
    """The constant keys an object's ``__dict__`` is read or written with in ``tree``:
    ``x.__dict__[key]``, ``x.__dict__.get(key)`` / ``setdefault`` / ``pop``, ``key in
    x.__dict__``."""
    keys = set()
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and _is_dict_of(node.value):
            key = node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and _is_dict_of(node.func.value) and node.args):
            key = node.args[0]
        elif (isinstance(node, ast.Compare) and len(node.comparators) == 1
              and _is_dict_of(node.comparators[0])):
            key = node.left
        if key is not None:
            assert isinstance(key, ast.Constant) and isinstance(key.value, str), ast.dump(node)
            keys.add(key.value)
    return keys


# What a framework caches on a kernel, in its __dict__: keys named after the framework.
_FRAMEWORK_KEYS = {"tilejit.frameworks.torch.": "_torch_", "tilejit.frameworks.jax": "_jax_"}


def test_a_kernels_dict_holds_the_interface_and_each_frameworks_own_keys():
    from tilejit.runtime.kernel import INTERNAL_INTERFACE

    wrong = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == "tilejit.runtime.kernel":
            continue
        prefixes = tuple(p for m, p in _FRAMEWORK_KEYS.items() if module.startswith(m))
        keys = _dict_keys(ast.parse(path.read_text(), str(path)))
        bad = sorted(k for k in keys if k not in INTERNAL_INTERFACE
                     and not (prefixes and k.startswith(prefixes)))
        if bad:
            wrong[module] = bad
    assert wrong == {}
    # The check reads every form a key takes.
    assert _dict_keys(ast.parse("k.__dict__['_a']; k.__dict__.get('_b'); '_c' in k.__dict__\n"
                                "k.__dict__.setdefault('_d', 1)")) == {"_a", "_b", "_c", "_d"}


def test_the_package_uses_only_the_kernels_internal_interface():
    from tilejit.runtime.kernel import INTERNAL_INTERFACE

    private = _kernel_private_names()
    assert {"_sig", "_core_kernel", "_unclaimed"} <= private
    outside = {module: sorted(names - INTERNAL_INTERFACE)
               for module, names in _private_kernel_uses(private).items()}
    assert {module: names for module, names in outside.items() if names} == {}
    # Every name of the interface is the kernel's (or set on it by the runtime) and used.
    used = set().union(*_private_kernel_uses(private | INTERNAL_INTERFACE).values())
    assert sorted(INTERNAL_INTERFACE - used) == []


def test_the_builder_reads_no_kernel_only_its_artifact():
    # export, the torch op's schema and the XLA target are written from the artifact the
    # builder made (tilejit.builder.artifact), never from a JITKernel's own attributes.
    from tilejit.runtime.kernel import INTERNAL_INTERFACE

    uses = _private_kernel_uses(_kernel_private_names() | INTERNAL_INTERFACE)
    assert {m: n for m, n in uses.items() if m.startswith("tilejit.builder.")} == {}


def test_the_interface_check_sees_a_private_attribute_read_elsewhere(tmp_path, monkeypatch):
    module = tmp_path / "tilejit" / "builder"
    module.mkdir(parents=True)
    (module / "x.py").write_text("def f(kernel):\n    return kernel._sig, self_ok(), "
                                 "getattr(kernel, '_core_kernel')\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "tilejit")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _private_kernel_uses({"_sig", "_core_kernel"}) == {
        "tilejit.builder.x": {"_sig", "_core_kernel"}}
