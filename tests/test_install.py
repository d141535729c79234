"""An install ready to run: a regular build (pip wheel, pip install .) carries the core
and the wrapper for the building interpreter, so the first call in a fresh environment
builds nothing but the kernel, and a machine without a C compiler runs the kernels that
are already compiled (exported or cached). Run-time builds of the core or the wrapper say
so on stderr first.

A wheel is built from this checkout and installed into a fresh virtual environment of the
interpreter running the tests, with what its children import (NumPy, the version this
environment has): nothing of another environment is visible to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT

# Builds a wheel and a virtual environment: tooling, left out by `-m "not slow"`.
pytestmark = pytest.mark.slow

KERNEL = textwrap.dedent("""
    import sys, numpy as np, tilejit
    from tilejit import T
    n = T.symbol("n")
    step = int(sys.argv[1])
    k = tilejit.compile(tilejit.Program("step_%d" % step, [T.Buffer((n,), "float32", name="X")],
        "void step_%d(float *X, int64_t n) { for (int64_t i = 0; i < n; ++i) X[i] += %d; }"
        % (step, step)))
    x = np.zeros(3, np.float32)
    k(x)
    print(x.tolist(), tilejit.__file__)
    if len(sys.argv) > 2:
        k.export(sys.argv[2])
""")

LOAD = textwrap.dedent("""
    import sys, numpy as np, tilejit
    x = np.zeros(3, np.float32)
    tilejit.load(sys.argv[1])(x)
    print(x.tolist())
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(out)], check=True,
                   capture_output=True, timeout=600)
    (found,) = out.glob("tilejit-*.whl")
    return found


@pytest.fixture(scope="module")
def venv_python(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    python = root / "bin" / "python"
    # The kernels' children import NumPy (tilejit's one run-time dependency they need; the
    # wheel carries the wrapper, so no Cython): installed as this environment has it.
    numpy = pytest.importorskip("numpy")
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel),
                           f"numpy=={numpy.__version__}"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return python


def _run(python: Path, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(env)
    return subprocess.run([str(python), "-c", code, *args], env=environment, cwd="/",
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_wheel_carries_the_core_and_this_pythons_wrapper(wheel):
    tag = sys.implementation.cache_tag.replace("python-", "p")  # cpython-311 -> cp311
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-{tag}-{tag}-{platform}.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "tilejit/_prebuilt/manifest.json" in names
    assert any(n.startswith("tilejit/_prebuilt/core/") and "/libtilejit_core-" in n
               for n in names)
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    assert any(n.startswith("tilejit/_prebuilt/wrapper/") and n.endswith(f"_tilejit{ext}")
               for n in names)


def test_a_fresh_install_builds_only_the_kernel(venv_python, tmp_path):
    cache = tmp_path / "cache"
    done = _run(venv_python, KERNEL, "1", TILEJIT_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    values, location = done.stdout.split(" /", 1)
    assert values == "[1.0, 1.0, 1.0]" and str(venv_python.parent.parent) in "/" + location
    assert done.stderr == ""  # no build of the core or the wrapper to announce
    assert sorted(p.name for p in cache.iterdir()) == ["kernels"]


def test_without_a_compiler_exported_and_cached_kernels_run(venv_python, tmp_path):
    cache, export = tmp_path / "cache", tmp_path / "step2"
    assert _run(venv_python, KERNEL, "2", str(export),
                TILEJIT_CACHE_DIR=str(cache)).returncode == 0
    no_compiler = {"PATH": str(venv_python.parent), "TILEJIT_CACHE_DIR": str(cache)}
    done = _run(venv_python, LOAD, str(export), **no_compiler)
    assert (done.returncode, done.stdout.strip()) == (0, "[2.0, 2.0, 2.0]"), done.stderr
    done = _run(venv_python, KERNEL, "2", **no_compiler)  # found in the cache
    assert done.returncode == 0 and done.stdout.startswith("[2.0, 2.0, 2.0]"), done.stderr
    done = _run(venv_python, KERNEL, "3", **no_compiler)  # never compiled: nothing to run
    assert done.returncode == 1
    assert "step_3: no C compiler found" in done.stderr
    assert "and no kernel compiled from this source is in the cache" in done.stderr


def test_a_run_time_build_says_what_it_builds_and_for_which_python(tmp_path):
    # This checkout carries no prebuilt core or wrapper: a fresh cache builds both.
    done = _run(Path(sys.executable), KERNEL, "4", TILEJIT_CACHE_DIR=str(tmp_path / "cache"),
                PYTHONPATH=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    version = ".".join(map(str, sys.version_info[:3]))
    assert len(lines) == 2, lines
    assert lines[0].startswith("tilejit: building the C core (libtilejit_core-")
    assert lines[1] == (f"tilejit: building the Cython wrapper for CPython {version} "
                        f"({sys.executable}): once per Python and tilejit version")


def test_the_checkout_run_beside_an_install_uses_its_prebuilt_core(venv_python, tmp_path):
    # `pip install . && python -m tilejit demo` from the checkout imports the checkout's
    # tilejit: its sources are the install's, so the install's core and wrapper serve.
    cache = tmp_path / "cache"
    done = _run(venv_python, KERNEL, "5", TILEJIT_CACHE_DIR=str(cache),
                PYTHONPATH=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 3)[3].strip() == str(REPO_ROOT / "tilejit" / "__init__.py")
    assert done.stderr == "" and sorted(p.name for p in cache.iterdir()) == ["kernels"]
