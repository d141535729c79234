"""Tests of the run-time build of the Cython wrapper and the C core (build_tools/).

Most tests build a tiny fixture tree laid out like the repository (core/include/tilejit,
core/src, wrapper/_tilejit.pyx and a .pxd) so that they are fast and independent of the
real wrapper's contents; one test builds the real sources. Every test uses its own
TILEJIT_CACHE_DIR. Modules are only ever imported in subprocesses: an extension loaded
into the pytest process under the name tilejit._tilejit could not be unloaded and would
shadow the real wrapper for every later test.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Tooling, builds of the core and the wrapper from scratch: left out by
# `pytest -m "not slow"` (CONTRIBUTING.md).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def _second_python() -> Path | None:
    """A CPython of this machine (pyenv's) of a supported minor version other than the one
    running the tests, newest first; None when there is none."""
    mine = "{}.{}.".format(*sys.version_info[:2])
    versions = Path.home() / ".pyenv" / "versions"
    found = [p for p in versions.glob("3.1[0-3].*")
             if not p.name.startswith(mine) and (p / "bin" / "python").exists()]
    found.sort(key=lambda p: tuple(int(x) for x in p.name.split(".")[:2]), reverse=True)
    return found[0] / "bin" / "python" if found else None


SECOND_PYTHON = _second_python()


def _import_build_tools():
    # The checkout's build_tools package is imported by path rather than through an
    # installed tilejit, so that the code under test is the code subprocesses run (they get
    # the repository root on PYTHONPATH) and importing it does not import tilejit.
    if "build_tools" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "build_tools",
            REPO / "build_tools" / "__init__.py",
            submodule_search_locations=[str(REPO / "build_tools")],
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["build_tools"] = package
        spec.loader.exec_module(package)
    return importlib.import_module("build_tools.core_build"), importlib.import_module(
        "build_tools.wrapper_build"
    )


core_build, wrapper_build = _import_build_tools()

# The core is built with hidden visibility: like the core's TJ_API functions, the fixture's
# one function is exported explicitly.
FIXTURE_HEADER = """\
#ifndef TILEJIT_FIXTURE_H_
#define TILEJIT_FIXTURE_H_
__attribute__((visibility("default"))) int tj_fixture_add(int a, int b);
#endif
"""
FIXTURE_C = """\
#include "tilejit/fixture.h"
int tj_fixture_add(int a, int b) { return a + b; }
"""
FIXTURE_PXD = """\
cdef extern from "tilejit/fixture.h" nogil:
    int tj_fixture_add(int a, int b)
"""
FIXTURE_PYX = """\
from fixture cimport tj_fixture_add


def add(int a, int b):
    return tj_fixture_add(a, b)
"""

# Loads the fixture wrapper in a fresh interpreter and prints its file and add(2, 3).
LOAD_SCRIPT = """\
import sys
from build_tools import wrapper_build
module = wrapper_build.load_wrapper(verbose=True, core_dir=sys.argv[1], wrapper_dir=sys.argv[2])
print(module.__file__)
print(module.add(2, 3))
"""


def _make_tree(root: Path) -> tuple[Path, Path]:
    core = root / "core"
    wrapper = root / "wrapper"
    (core / "include" / "tilejit").mkdir(parents=True)
    (core / "src").mkdir()
    wrapper.mkdir()
    (core / "include" / "tilejit" / "fixture.h").write_text(FIXTURE_HEADER)
    (core / "src" / "fixture.c").write_text(FIXTURE_C)
    shutil.copy(REPO / "core" / "flags.mk", core / "flags.mk")  # the core's own flags
    (wrapper / "fixture.pxd").write_text(FIXTURE_PXD)
    (wrapper / "_tilejit.pyx").write_text(FIXTURE_PYX)
    # The real wrapper/ is a package (it is shipped as tilejit._wrapper); the build must
    # not let that change the module's name.
    (wrapper / "__init__.py").write_text('"""Fixture wrapper sources."""\n')
    return core, wrapper


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    return _make_tree(tmp_path / "src")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(root))
    return root


def _env(cache: Path) -> dict[str, str]:
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "TILEJIT_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(paths)}


def _load_in_subprocess(
    cache: Path, tree: tuple[Path, Path], python: str = sys.executable
) -> subprocess.CompletedProcess:
    core, wrapper = tree
    return subprocess.run(
        [python, "-c", LOAD_SCRIPT, str(core), str(wrapper)],
        env=_env(cache),
        cwd=cache.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _loaded(done: subprocess.CompletedProcess) -> tuple[Path, int]:
    assert done.returncode == 0, done.stderr
    path, value = done.stdout.split()
    return Path(path), int(value)


def test_second_build_reuses_cached_module(cache, tree):
    first = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    mtime = first.stat().st_mtime_ns
    second = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    assert second == first
    assert second.stat().st_mtime_ns == mtime
    assert first.parent.parent.parent == cache / "wrapper"
    assert first.parent.parent.name == wrapper_build.abi_tag()
    assert first.parent.name == wrapper_build.source_hash(*tree)
    # The entry holds the module and its checksum: no temporaries, no lock, no C output.
    assert sorted(p.name for p in first.parent.iterdir()) == sorted([first.name, "meta.json"])
    assert first.parent.with_name(first.parent.name + ".lock").exists()
    # The build must not write into the source trees (read-only when installed).
    assert sorted(p.name for p in tree[1].iterdir()) == [
        "__init__.py",
        "_tilejit.pyx",
        "fixture.pxd",
    ]


def test_only_the_module_init_is_exported(cache, tree):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    module = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    done = subprocess.run(
        [nm, "-D", "--defined-only", str(module)], capture_output=True, text=True, check=True
    )
    # The core is not in the wrapper (it is the shared core library), and hidden visibility
    # keeps the Cython code private, but CPython must still find PyInit__tilejit.
    assert "PyInit__tilejit" in done.stdout
    assert "tj_fixture_add" not in done.stdout
    undefined = subprocess.run(
        [nm, "-D", "--undefined-only", str(module)], capture_output=True, text=True, check=True
    )
    assert "tj_fixture_add" in undefined.stdout


def test_changed_source_gives_new_hash_and_rebuild(cache, tree, tmp_path):
    old = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    copy = tmp_path / "changed"
    shutil.copytree(tree[0], copy / "core")
    shutil.copytree(tree[1], copy / "wrapper")
    changed = (copy / "core", copy / "wrapper")
    # A copy of unchanged sources is the same entry: the hash uses relative paths.
    assert wrapper_build.source_hash(*changed) == wrapper_build.source_hash(*tree)
    source = copy / "core" / "src" / "fixture.c"
    source.write_text(source.read_text().replace("a + b;", "a + b + 100;"))
    assert wrapper_build.source_hash(*changed) != wrapper_build.source_hash(*tree)

    new = wrapper_build.build_wrapper(core_dir=changed[0], wrapper_dir=changed[1])
    assert new != old and new.exists() and old.exists()
    assert _loaded(_load_in_subprocess(cache, changed)) == (new, 105)
    assert _loaded(_load_in_subprocess(cache, tree)) == (old, 5)


def test_concurrent_first_builds_build_once(cache, tree):
    core, wrapper = tree
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_SCRIPT, str(core), str(wrapper)],
            env=_env(cache),
            cwd=cache.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        results.append(
            subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        )
    loaded = {_loaded(done) for done in results}
    assert len(loaded) == 1
    path, value = loaded.pop()
    assert value == 5
    # The core and the wrapper were each compiled by exactly one process; the others waited
    # on the lock and found its file.
    for built in (path, core_build.core_library_path(tree[0])):
        builders = [done for done in results if f"tilejit: building {built}" in done.stderr]
        assert len(builders) == 1, [done.stderr for done in results]
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "meta.json"])


def test_corrupt_cached_module_is_rebuilt_on_load(cache, tree):
    path = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    path.write_bytes(b"this is not an ELF file\n" * 100)
    done = _load_in_subprocess(cache, tree)
    assert _loaded(done) == (path, 5)
    assert "rebuilding" in done.stderr
    assert path.read_bytes()[:4] == b"\x7fELF"


def test_compiler_failure_reports_command_and_output(cache, tree):
    (tree[0] / "src" / "broken.c").write_text("int broken(void) { return }\n")
    with pytest.raises(RuntimeError) as excinfo:
        wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    message = str(excinfo.value)
    assert "broken.c" in message and " -c " in message  # the failing command
    assert "error" in message  # the compiler's own diagnostic
    # Nothing published, no temporaries left.
    core_entry = core_build.core_library_path(tree[0]).parent
    assert not core_entry.exists()
    assert not [p for p in core_entry.parent.iterdir() if p.name.startswith(".tmp-")]


def test_cython_failure_reports_its_messages(cache, tree):
    (tree[1] / "_tilejit.pyx").write_text("def add(int a, int b):\n    return undefined_name(a\n")
    with pytest.raises(RuntimeError, match="Cython failed") as excinfo:
        wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    assert "_tilejit.pyx" in str(excinfo.value)


def test_second_python_builds_beside_the_first(cache, tree, tmp_path):
    if SECOND_PYTHON is None:
        pytest.skip("no second CPython 3.10-3.13 under ~/.pyenv/versions")
    # A fresh environment of the second interpreter with what a user of it would install:
    # the one run-time build dependency.
    venv = tmp_path / "second"
    subprocess.run([str(SECOND_PYTHON), "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "Cython>=3.0"],
                             capture_output=True, text=True, check=False, timeout=600)
    assert install.returncode == 0, install.stderr
    first = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    mtime = first.stat().st_mtime_ns

    second, value = _loaded(_load_in_subprocess(cache, tree, python=str(python)))
    assert value == 5
    assert second != first
    tag = "cpython-" + "".join(SECOND_PYTHON.parent.parent.name.split(".")[:2]) + "-"
    assert second.parent.parent.name.startswith(tag)
    assert second.parent.parent.parent == first.parent.parent.parent
    assert first.stat().st_mtime_ns == mtime
    assert first.exists() and second.exists()


def test_the_makefile_and_the_cached_build_use_the_one_set_of_core_flags(tmp_path):
    # core/flags.mk is read by build_tools and included by core/Makefile: every compile of
    # a core source in either carries all its flags.
    from build_tools import core_build

    flags = core_build.core_flags()
    assert {"-std=gnu11", "-fvisibility=hidden", "-fexceptions"} <= set(flags)
    assert set(flags) <= set(core_build._core_cflags(REPO / "core"))
    done = subprocess.run(["make", "-n", "-B", "-C", str(REPO / "core"), "lib", "DLPACK_REF=",
                           f"BUILD={tmp_path}"], capture_output=True, text=True, check=True)
    compiles = [line.split() for line in done.stdout.splitlines() if " -c src/" in line]
    assert len(compiles) == len(list((REPO / "core" / "src").glob("*.c")))
    for command in compiles:
        assert set(flags) <= set(command), command


def test_real_sources_build_and_load(cache):
    done = subprocess.run(
        [sys.executable, "-m", "build_tools"],
        env=_env(cache),
        cwd=cache.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    paths = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert Path(paths["wrapper"]) == wrapper_build.wrapper_path()
    assert Path(paths["core"]) == core_build.core_library_path()

    check = textwrap.dedent(
        """\
        import ctypes, sys
        from build_tools import wrapper_build
        module = wrapper_build.load_wrapper()
        assert module.__name__ == "tilejit._tilejit", module.__name__
        assert module.__file__ == sys.argv[1], module.__file__
        # The ctypes backend needs the core's public functions exported.
        ctypes.CDLL(sys.argv[2]).tj_last_error
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", check, paths["wrapper"], paths["core"]],
        env=_env(cache),
        cwd=cache.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# --- damaged and unusable caches -------------------------------------

# Loads the fixture core through ctypes (as the ctypes backend does) in a fresh interpreter.
CORE_SCRIPT = """\
import sys
from build_tools import core_build
path, lib = core_build.load_core_library(verbose=True, core_dir=sys.argv[1])
print(path)
print(lib.tj_fixture_add(2, 3))
"""


def _damage(path: Path, how: str) -> None:
    """Damages a published library and rewrites its meta.json to match, as a file that was
    already damaged when it was published (or copied so) would be: size and hash alone
    cannot tell."""
    import hashlib
    import json

    data = path.read_bytes()
    data = {"truncated": data[: len(data) // 2], "empty": b"",
            "garbage": b"\x7fELF garbage " * 100}[how]
    path.write_bytes(data)
    meta = path.parent / "meta.json"
    record = json.loads(meta.read_text())
    record.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    meta.write_text(json.dumps(record))


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage"])
@pytest.mark.parametrize("artifact", ["core", "wrapper"])
def test_a_damaged_library_with_a_matching_meta_is_rebuilt_not_loaded(cache, tree, artifact,
                                                                       how):
    wrapper = wrapper_build.build_wrapper(core_dir=tree[0], wrapper_dir=tree[1])
    core = core_build.core_library_path(tree[0])
    damaged = core if artifact == "core" else wrapper
    _damage(damaged, how)
    # A truncated library used to be loaded, and the first touch of a missing page killed
    # the process with SIGBUS.
    done = _load_in_subprocess(cache, tree)
    assert _loaded(done) == (wrapper, 5)
    assert f"{damaged} is damaged; rebuilding it" in done.stderr
    assert damaged.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage"])
def test_the_ctypes_core_rebuilds_a_damaged_library(cache, tree, how):
    path = core_build.build_core_library(core_dir=tree[0])
    _damage(path, how)
    done = subprocess.run([sys.executable, "-c", CORE_SCRIPT, str(tree[0])], env=_env(cache),
                          cwd=cache.parent, capture_output=True, text=True, timeout=300,
                          check=False)
    assert _loaded(done) == (path, 5)
    assert "is damaged; rebuilding it" in done.stderr


def test_a_core_the_loader_rejects_is_rebuilt_once(cache, tree):
    # A whole ELF file that is no loadable library (an executable): it passes every check
    # of the cache, and only dlopen() refuses it. Deleted and rebuilt, once.
    import hashlib
    import json

    path = core_build.build_core_library(core_dir=tree[0])
    path.write_bytes(Path(sys.executable).resolve().read_bytes())
    meta = path.parent / "meta.json"
    record = json.loads(meta.read_text())
    data = path.read_bytes()
    record.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    meta.write_text(json.dumps(record))
    done = subprocess.run([sys.executable, "-c", CORE_SCRIPT, str(tree[0])], env=_env(cache),
                          cwd=cache.parent, capture_output=True, text=True, timeout=300,
                          check=False)
    assert _loaded(done) == (path, 5)
    assert "rebuilding it" in done.stderr and f"removing unusable {path}" in done.stderr


FALLBACK_SCRIPT = """\
import sys, warnings
from build_tools import core_build, disk_cache, wrapper_build
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = wrapper_build.load_wrapper(core_dir=sys.argv[1], wrapper_dir=sys.argv[2])
    core, lib = core_build.load_core_library(core_dir=sys.argv[1])
print(module.add(2, 3), lib.tj_fixture_add(1, 1))
print(disk_cache.cache_root())
print(module.__file__)
print(core)
for warning in caught:
    print("WARNING", warning.message)
"""


@pytest.mark.parametrize("unusable", ["a file", "files where its directories go"])
def test_an_unusable_cache_falls_back_to_one_private_root(cache, tree, unusable):
    if unusable == "a file":
        cache.write_text("not a directory")
    else:
        cache.mkdir()
        for name in ("core", "wrapper", "kernels"):
            (cache / name).write_text("not a directory")
    done = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT, *map(str, tree)],
                          env=_env(cache), cwd=cache.parent, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "5 2"
    private = Path(lines[1])
    assert private != cache and private.name.startswith("cache-")
    # The wrapper and the core it links against are both in the private root...
    assert Path(lines[2]).is_relative_to(private) and Path(lines[3]).is_relative_to(private)
    # ...which is removed at exit, after one warning naming the variable.
    assert not private.exists()
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 1, warnings
    assert f"TILEJIT_CACHE_DIR={cache} is unusable" in warnings[0]
