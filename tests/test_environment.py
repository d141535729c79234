"""TILEJIT_* environment variables (docs/environment.md): each is checked in one place
(`build_tools/env.py`), and a value tilejit does not accept is refused every time it is
read, before anything is built or written, with a message naming the variable, the value
and what is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO_ROOT

from tilejit.native._build import disk_cache, env

# A child that compiles one kernel four times (through a fresh JIT cache each time),
# printing "ok" or the error of each attempt.
FOUR_COMPILES = textwrap.dedent("""
    import tilejit
    for _ in range(4):
        try:
            tilejit.compile(tilejit.Program(name="nop", source="void nop(void) {}", params=[]))
            print("ok")
        except Exception as exc:
            print(type(exc).__name__, exc)
""")


def child(code: str, root, **extra: str) -> subprocess.CompletedProcess:
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    environ = {**os.environ, "TILEJIT_CACHE_DIR": str(root),
               "PYTHONPATH": os.pathsep.join(paths), **extra}
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize(("variable", "value", "accepted"), [
    ("TILEJIT_CACHE_MAX_SIZE", "abc", "a size of 0 or more bytes"),
    ("TILEJIT_CACHE_MAX_SIZE", "-1", "a size of 0 or more bytes"),
    ("TILEJIT_DISABLE_CACHE", "maybe", "one of 1, true, yes, on, 0, false, no, off"),
    ("TILEJIT_VERBOSE", "2", "one of 1, true, yes, on, 0, false, no, off"),
    ("TILEJIT_TARGET", "gpu", "one of cpu, cuda"),
    ("TILEJIT_EXECUTION_BACKEND", "fast", "one of auto, cython, dlpack, ctypes"),
    ("TILEJIT_COMPILE_FLAGS", "-O2 '-g", "words split like a shell command"),
    ("TILEJIT_CC", "'cc", "words split like a shell command"),
])
def test_a_bad_value_is_refused_at_every_compile_before_any_write(
        tilejit_cache_dir, tmp_path, variable, value, accepted):
    root = tmp_path / "cache"
    done = child(FOUR_COMPILES, root, **{variable: value})
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and len(set(lines)) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"BadValue {variable}={value!r}: expected {accepted}"), lines[0]
    assert not (root / "kernels").exists()  # nothing written before the refusal


def test_fast_paths_maybe_is_refused_at_import(tmp_path):
    done = child("import tilejit", tmp_path, TILEJIT_FAST_PATHS="maybe")
    assert done.returncode != 0
    assert "TILEJIT_FAST_PATHS='maybe': expected one of 1, true, yes, on, 0, false, no, off" \
        in done.stderr
    for word in ("0", "off", "No", "TRUE", "yes", ""):
        assert child("import tilejit", tmp_path, TILEJIT_FAST_PATHS=word).returncode == 0


def test_choices_and_flags(monkeypatch):
    for value, expected in (("nvcc", "nvcc"), ("nvrtc", "nvrtc"), ("", None)):
        monkeypatch.setenv("TILEJIT_CUDA_COMPILER", value)
        assert env.choice("TILEJIT_CUDA_COMPILER", ("nvcc", "nvrtc")) == expected
    monkeypatch.setenv("TILEJIT_CUDA_COMPILER", "clang")
    from tilejit.builder.cuda_compiler import resolve_arch, resolve_compiler

    with pytest.raises(env.BadValue, match="TILEJIT_CUDA_COMPILER='clang': expected one of "
                                           "nvcc, nvrtc"):
        resolve_compiler()
    monkeypatch.setenv("TILEJIT_CUDA_ARCH", "sm_banana")
    with pytest.raises(env.BadValue, match="TILEJIT_CUDA_ARCH='sm_banana': expected CUDA"):
        resolve_arch()
    for value, expected in (("ON", True), ("off", False), (" 1 ", True), ("", False)):
        monkeypatch.setenv("TILEJIT_VERBOSE", value)
        assert env.flag("TILEJIT_VERBOSE") is expected
    monkeypatch.setenv("TILEJIT_CACHE_MAX_SIZE", "0")
    assert disk_cache.max_size() == 0


BUILDS = textwrap.dedent("""
    import numpy as np, tilejit
    from tilejit import T
    n = T.symbol("n")
    for i in range(3):
        k = tilejit.compile(tilejit.Program("z%d" % i, [T.Buffer((n,), "float32", name="X")],
                                            "void z%d(float *X, int64_t n) {}" % i))
        k(np.ones(3, np.float32))
        print("ok")
""")


def test_max_size_zero_keeps_the_newest_kernel_and_this_process_core(tilejit_cache_dir,
                                                                     tmp_path):
    """0 keeps the entry just written (the newest kernel) and the writing process's core
    and wrapper, nothing else: each of them is built once, and every kernel keeps
    running after its file is evicted."""
    root = tmp_path / "cache"
    done = child(BUILDS, root, TILEJIT_CACHE_MAX_SIZE="0")
    assert done.stdout.split() == ["ok"] * 3, done.stderr
    assert done.stderr.count("building the C core") <= 1, done.stderr
    assert done.stderr.count("building the Cython wrapper") <= 1, done.stderr
    kept = {p.name for p in (root / "kernels").glob("*/*") if p.is_dir()}
    assert len(kept) == 1
    again = child(BUILDS.replace("z%d", "y%d"), root, TILEJIT_CACHE_MAX_SIZE="0")
    assert again.stdout.split() == ["ok"] * 3, again.stderr
    assert "building" not in again.stderr  # the core and the wrapper it uses stay
    now = {p.name for p in (root / "kernels").glob("*/*") if p.is_dir()}
    assert len(now) == 1 and not now & kept


def test_every_variable_is_read_through_env():
    # One reader (build_tools/env.py) checks every TILEJIT_* value the same way; a module
    # that reads os.environ for one itself would bypass the checks. The other tools'
    # variables tilejit reads (CUDA_HOME, CXX, PATH) go through it too; handing the whole
    # environment to a child ({**os.environ}) reads no variable.
    import re

    reads = re.compile(r"""(?:environ\.get|getenv)\(|environ\[[^\]]+\](?!\s*=)""")
    # prebuilt.py saves and restores TILEJIT_CACHE_DIR around a build: it reads no setting.
    exempt = {"env.py", "prebuilt.py"}
    found = []
    for top in ("tilejit", "build_tools"):
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            if path.name in exempt:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if reads.search(code) and ">>>" not in line:
                    found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_core_reads_the_environment_in_env_c_only():
    # The C side's one reader: core/src/env.c, whose functions the rest of the core calls.
    import re

    calls = re.compile(r"\b(?:getenv|secure_getenv)\s*\(|\benviron\b")
    found = [f"{path.relative_to(REPO_ROOT)}:{number}"
             for pattern in ("core/src/*.[ch]", "core/include/tilejit/*.h", "core/torch_op/*.c")
             for path in sorted(REPO_ROOT.glob(pattern)) if path.name != "env.c"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if calls.search(line.split("//")[0])]
    assert found == []
    env_c = (REPO_ROOT / "core" / "src" / "env.c").read_text()
    assert set(re.findall(r'getenv\("(\w+)"\)|read_or\("(\w+)"', env_c)) == {
        ("", "TILEJIT_LIBCUDA"), ("", "TMPDIR")}
    # Each TILEJIT_ variable the core reads is documented with the others.
    assert "`TILEJIT_LIBCUDA`" in (REPO_ROOT / "docs" / "environment.md").read_text()
