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
