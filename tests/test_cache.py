"""Tests for the on-disk artifact cache (tilejit/builder/cache.py) and the CPU compiler driver."""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Running pytest from anywhere must find the package in this checkout, not an installed one.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

cache = importlib.import_module("tilejit.builder.cache")
compiler = importlib.import_module("tilejit.builder.compiler")
CompileError = compiler.CompileError

ANSWER_SOURCE = "int answer(void) { return 42; }\n"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Give every test its own cache directory and a process memo as fresh as a new process."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("TILEJIT_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("TILEJIT_CC", raising=False)
    cache._reset_memo()
    yield root
    cache._reset_memo()


class CountingBuild:
    """A build function that writes fixed bytes and records how often it ran."""

    def __init__(self, payload: bytes = b"\x7fELF pretend library") -> None:
        self.payload = payload
        self.calls: list[Path] = []

    def __call__(self, out: Path) -> None:
        self.calls.append(out)
        out.write_bytes(self.payload)


def _entry(root: Path, key: str) -> Path:
    return root / "kernels" / key[:2] / key


def _leftover_tmp_dirs(root: Path) -> list[str]:
    kernels = root / "kernels"
    if not kernels.exists():
        return []
    return [p.name for p in kernels.iterdir() if p.name.startswith(".tmp-")]


# --- cache_dir, cache_disabled, artifact_key ---------------------------------------------------


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "x"))
    assert cache.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("TILEJIT_CACHE_DIR")
    assert cache.cache_dir() == Path.home() / ".cache" / "tilejit"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("", False),
        ("no", False),
    ],
)
def test_cache_disabled_values(monkeypatch, value, expected):
    monkeypatch.setenv("TILEJIT_DISABLE_CACHE", value)
    assert cache.cache_disabled() is expected


def test_artifact_key_is_canonical_and_sensitive_to_every_part():
    base = {
        "source": "int f(void);",
        "target": "cpu",
        "flags": ["-O3", "-fopenmp"],
        "compiler": "gcc 12.2.0",
        "version": "0.1.0",
        "glue": "v1",
    }
    key = cache.artifact_key(**base)
    assert len(key) == 64
    assert all(c in "0123456789abcdef" for c in key)
    # Keyword order and list-vs-tuple do not matter; the key is stable across calls.
    assert cache.artifact_key(**dict(reversed(list(base.items())))) == key
    assert cache.artifact_key(**{**base, "flags": ("-O3", "-fopenmp")}) == key
    changed = {
        "source": "int f(void); ",
        "target": "cuda",
        "flags": ["-fopenmp", "-O3"],
        "compiler": "gcc 12.3.0",
        "version": "0.1.1",
        "glue": "v2",
    }
    keys = {key}
    for name, value in changed.items():
        keys.add(cache.artifact_key(**{**base, name: value}))
    keys.add(cache.artifact_key(**base, extra=None))
    assert len(keys) == len(changed) + 2
    with pytest.raises(TypeError):
        cache.artifact_key(source=object())


# --- get_or_build: hits, misses, corruption, failures ------------------------------------------


def test_miss_then_hit(isolated_cache):
    key = cache.artifact_key(source="a")
    build = CountingBuild()
    first = cache.get_or_build(key, build)
    assert first == _entry(isolated_cache, key) / "kernel.so"
    assert first.read_bytes() == build.payload
    meta = json.loads((first.parent / "meta.json").read_text())
    assert meta["size"] == len(build.payload)
    assert len(build.calls) == 1
    # The build wrote into a private directory, not into the published entry.
    assert build.calls[0].parent != first.parent

    assert cache.get_or_build(key, build) == first
    cache._reset_memo()  # As a new process would see it: verified from meta.json.
    assert cache.get_or_build(key, build) == first
    assert len(build.calls) == 1
    assert _leftover_tmp_dirs(isolated_cache) == []


def test_suffix_and_distinct_keys():
    build = CountingBuild()
    cubin = cache.get_or_build(cache.artifact_key(source="a"), build, suffix=".cubin")
    assert cubin.name == "kernel.cubin"
    cache.get_or_build(cache.artifact_key(source="b"), build)
    assert len(build.calls) == 2


def test_bad_key_or_suffix_rejected():
    with pytest.raises(ValueError, match="cache key"):
        cache.get_or_build("../../etc", CountingBuild())
    with pytest.raises(ValueError, match="suffix"):
        cache.get_or_build("abcdef", CountingBuild(), suffix="/x")


@pytest.mark.parametrize(
    "damage", ["truncate", "flip_byte", "garbage_meta", "missing_meta", "missing_artifact"]
)
@pytest.mark.parametrize("forget", [False, True])
def test_corrupt_entry_is_rebuilt(isolated_cache, damage, forget):
    key = cache.artifact_key(source="corrupt")
    build = CountingBuild(b"0123456789" * 100)
    path = cache.get_or_build(key, build)
    assert path.parent == _entry(isolated_cache, key)
    meta = path.parent / "meta.json"
    if damage == "truncate":
        with open(path, "r+b") as handle:
            handle.truncate(10)
    elif damage == "flip_byte":
        # Same size, and the mtime is put back, so only the hash can tell.
        info = os.stat(path)
        data = bytearray(path.read_bytes())
        data[5] ^= 0xFF
        path.write_bytes(bytes(data))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        forget = True  # Within one process a same-inode same-mtime edit is trusted.
    elif damage == "garbage_meta":
        meta.write_text("{not json")
        forget = True
    elif damage == "missing_meta":
        meta.unlink()
        forget = True
    elif damage == "missing_artifact":
        path.unlink()
    if forget:
        cache._reset_memo()
    rebuilt = cache.get_or_build(key, build)
    assert rebuilt == path
    assert len(build.calls) == 2
    assert rebuilt.read_bytes() == build.payload
    assert json.loads(meta.read_text())["size"] == len(build.payload)
    assert cache.get_or_build(key, build) == path
    assert len(build.calls) == 2


def test_failing_build_publishes_nothing(isolated_cache):
    key = cache.artifact_key(source="fails first")

    def failing(out: Path) -> None:
        out.write_bytes(b"half-written")
        raise CompileError("k", "k.c:1:1: error: boom", ["cc"], "x", 1)

    with pytest.raises(CompileError):
        cache.get_or_build(key, failing)
    assert not _entry(isolated_cache, key).exists()
    assert _leftover_tmp_dirs(isolated_cache) == []

    def silent(_out: Path) -> None:
        pass  # Writes nothing: must not publish an empty entry either.

    with pytest.raises(RuntimeError, match="did not write"):
        cache.get_or_build(key, silent)
    assert not _entry(isolated_cache, key).exists()

    build = CountingBuild()
    path = cache.get_or_build(key, build)
    assert path.read_bytes() == build.payload
    assert len(build.calls) == 1


def test_disabled_cache_builds_every_time_privately(isolated_cache, monkeypatch):
    monkeypatch.setenv("TILEJIT_DISABLE_CACHE", "1")
    key = cache.artifact_key(source="nocache")
    build = CountingBuild()
    first = cache.get_or_build(key, build)
    second = cache.get_or_build(key, build)
    assert len(build.calls) == 2
    assert first != second
    assert first.parent != second.parent
    assert first.read_bytes() == second.read_bytes() == build.payload
    assert first.parent.name.startswith("private-")
    assert not isolated_cache.exists()  # Nothing shared, not even the directory.
    with pytest.raises(ZeroDivisionError):
        cache.get_or_build(key, lambda _out: 1 / 0)


@pytest.mark.parametrize("unusable", ["file", "kernels is a file"])
def test_unusable_cache_falls_back_to_a_private_root_once(isolated_cache, unusable):
    # The root is a file, or a file sits where a directory of it goes (as good as
    # read-only for the kernels, and read-only directories do not stop root).
    isolated_cache.parent.mkdir(parents=True, exist_ok=True)
    if unusable == "file":
        isolated_cache.write_text("a file where the cache directory should be")
    else:
        isolated_cache.mkdir()
        (isolated_cache / "kernels").write_text("a file where a directory should be")
    build = CountingBuild()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = cache.get_or_build(cache.artifact_key(source="ro"), build)
        second = cache.get_or_build(cache.artifact_key(source="ro 2"), build)
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    assert str(caught[0].message).startswith(
        f"tilejit: TILEJIT_CACHE_DIR={isolated_cache} is unusable (")
    assert "set TILEJIT_CACHE_DIR to a writable directory" in str(caught[0].message)
    private = cache.cache_dir()
    assert private != isolated_cache and private.name.startswith("cache-")
    for built in (path, second):
        assert built.read_bytes() == build.payload
        assert built.is_relative_to(private / "kernels")
    # The private root is a cache like any other: a second lookup is a hit.
    assert cache.get_or_build(cache.artifact_key(source="ro"), build) == path
    assert len(build.calls) == 2


def test_a_check_refuses_a_damaged_artifact_and_a_bad_build(isolated_cache):
    import hashlib

    def whole(path):
        return None if Path(path).read_bytes().endswith(b"END") else "no END"

    key = cache.artifact_key(source="checked")
    build = CountingBuild(b"library END")
    path = cache.get_or_build(key, build, check=whole)
    # Damaged with its meta.json rewritten to match: only the check can tell.
    path.write_bytes(b"library")
    meta = path.parent / "meta.json"
    record = json.loads(meta.read_text())
    record.update(size=7, sha256=hashlib.sha256(b"library").hexdigest())
    meta.write_text(json.dumps(record))
    cache._reset_memo()
    assert cache.get_or_build(key, build, check=whole) == path
    assert path.read_bytes() == b"library END" and len(build.calls) == 2
    with pytest.raises(RuntimeError, match="the build wrote an unusable kernel.so: no END"):
        cache.get_or_build(cache.artifact_key(source="bad"), CountingBuild(b"x"), check=whole)
    assert not _entry(isolated_cache, cache.artifact_key(source="bad")).exists()


def test_stale_tmp_dirs_are_swept(isolated_cache):
    kernels = isolated_cache / "kernels"
    stale = kernels / ".tmp-crashed"
    stale.mkdir(parents=True)
    (stale / "kernel.so").write_bytes(b"x")
    old = time.time() - 3 * 24 * 3600
    os.utime(stale, (old, old))
    fresh = kernels / ".tmp-live"
    fresh.mkdir()
    cache.get_or_build(cache.artifact_key(source="sweep"), CountingBuild())
    assert not stale.exists()
    assert fresh.exists()


def test_threads_share_one_build():
    key = cache.artifact_key(source="threads")
    calls = []

    def slow_build(out: Path) -> None:
        calls.append(1)
        time.sleep(0.2)
        out.write_bytes(b"threaded")

    results: list[Path] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results.append(cache.get_or_build(key, slow_build))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 8
    assert len(set(results)) == 1


_WORKER_SCRIPT = textwrap.dedent(
    """
    import ctypes, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from tilejit.builder import cache, compiler

    counter, go = sys.argv[2], sys.argv[3]
    source = "int answer(void) { return 42; }\\n"

    def build(out):
        with open(counter, "a") as handle:
            handle.write(f"{os.getpid()}\\n")
        time.sleep(0.3)  # Widen the window in which the others must wait, not rebuild.
        compiler.compile_cpu(source, "answer", ["-O2"], out)

    key = cache.artifact_key(source=source, flags=["-O2"])
    while not os.path.exists(go):
        time.sleep(0.001)
    path = cache.get_or_build(key, build)
    assert ctypes.CDLL(str(path)).answer() == 42
    print(path)
    """
)


def test_processes_race_to_one_build(isolated_cache, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER_SCRIPT)
    counter = tmp_path / "builds.txt"
    go = tmp_path / "go"
    env = dict(os.environ, TILEJIT_CACHE_DIR=str(isolated_cache))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(REPO_ROOT), str(counter), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    time.sleep(0.3)  # Let every worker import and reach the start line.
    go.touch()
    outputs = [proc.communicate(timeout=60) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    assert len(counter.read_text().splitlines()) == 1
    assert _leftover_tmp_dirs(isolated_cache) == []


_KILLED_BUILDER_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from tilejit.builder import cache

    def build(out):
        out.write_bytes(b"partial")
        print("building", flush=True)
        time.sleep(60)  # Killed here, holding the lock, with a half-built artifact.

    cache.get_or_build(sys.argv[2], build)
    """
)


def test_builder_killed_mid_build_leaves_no_entry(isolated_cache, tmp_path):
    key = cache.artifact_key(source="killed")
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_BUILDER_SCRIPT)
    env = dict(os.environ, TILEJIT_CACHE_DIR=str(isolated_cache))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(REPO_ROOT), key],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == "building"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    # The kernel released the dead process's flock; its temp dir is left for the sweep.
    assert not _entry(isolated_cache, key).exists()
    build = CountingBuild()
    path = cache.get_or_build(key, build)
    assert path.read_bytes() == build.payload
    assert len(build.calls) == 1


# --- compiler driver ---------------------------------------------------------------------------


def test_compile_cpu_and_load(tmp_path):
    out = tmp_path / "answer.so"
    compiler.compile_cpu(ANSWER_SOURCE, "answer", None, out)
    assert ctypes.CDLL(str(out)).answer() == 42


def test_user_flags_override_defaults(tmp_path):
    source = "long stdc(void) { return __STDC_VERSION__; }\n"
    out = tmp_path / "std.so"
    compiler.compile_cpu(source, "std", ["-std=c99"], out)
    lib = ctypes.CDLL(str(out))
    lib.stdc.restype = ctypes.c_long
    assert lib.stdc() == 199901


def test_openmp_flag_compiles(tmp_path):
    source = textwrap.dedent(
        """
        #include <omp.h>
        void fill(float *x, long n) {
            #pragma omp parallel for
            for (long i = 0; i < n; ++i) x[i] = (float)i * 2.0f;
        }
        int threads(void) { return omp_get_max_threads(); }
        """
    )
    out = tmp_path / "omp.so"
    compiler.compile_cpu(source, "fill", ["-O3", "-fopenmp"], out)
    lib = ctypes.CDLL(str(out))
    assert lib.threads() >= 1
    buf = (ctypes.c_float * 1000)()
    lib.fill(buf, ctypes.c_long(1000))
    assert buf[999] == 1998.0


def test_compile_error_quotes_the_user_line(tmp_path):
    # The lead's layout: a generated prelude, then `#line 1` so user line numbers hold.
    user = "void vec_bad(float *a) {\n    a[0] = 1.0f;\n    a[1] = 2.0f\n    a[2] = 3.0f;\n}\n"
    source = '#include <stdint.h>\ntypedef int prelude_t;\n#line 1 "vec_bad.c"\n' + user
    with pytest.raises(CompileError) as info:
        compiler.compile_cpu(source, "vec_bad", ["-O3"], tmp_path / "bad.so")
    err = info.value
    message = str(err)
    assert message.startswith("vec_bad: compilation failed (")
    assert " exit 1)" in message.splitlines()[0]
    assert "error" in err.log
    # gcc blames the line after the missing ';' (4), clang the line with it (3).
    assert err.lineno in (3, 4)
    expected = user.splitlines()[err.lineno - 1].strip()
    assert err.line_text.strip() == expected
    assert f"  line {err.lineno}: {expected}" in message
    assert "vec_bad.c:" in message
    assert err.kernel_name == "vec_bad"
    assert err.source == source
    assert isinstance(err.command, list)
    assert "-O3" in err.command
    assert err.command.index("-O2") < err.command.index("-O3")
    assert isinstance(err, RuntimeError)
    assert not (tmp_path / "bad.so").exists()


def test_compile_error_without_line_directive(tmp_path):
    source = "int ok(void) { return 1; }\nint broken(void) { return undefined_name; }\n"
    with pytest.raises(CompileError) as info:
        compiler.compile_cpu(source, "broken", None, tmp_path / "b.so")
    assert info.value.lineno == 2
    assert "line 2: int broken(void) { return undefined_name; }" in str(info.value)


def test_compile_error_pickles():
    import pickle

    err = CompileError("k", "k.c:1:5: error: nope\n", ["gcc", "k.c"], "int x y;\n", 1)
    clone = pickle.loads(pickle.dumps(err))
    assert str(clone) == str(err)
    assert clone.log == err.log
    assert clone.lineno == 1


def test_compile_error_parses_nvcc_format():
    log = 'kernel.cu(2): error: identifier "foo" is undefined\n\n1 error detected\n'
    err = CompileError("k", log, ["nvcc"], "__global__ void k() {\n  foo();\n}\n", 2)
    assert err.lineno == 2
    assert "line 2: foo();" in str(err)


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CC", "/nonexistent/tilejit-cc --flag")
    with pytest.raises(CompileError, match="no C compiler found.*TILEJIT_CC"):
        compiler.find_cc()
    with pytest.raises(CompileError, match="TILEJIT_CC"):
        compiler.compile_cpu(ANSWER_SOURCE, "answer", None, tmp_path / "a.so")
    monkeypatch.setenv("TILEJIT_CC", "tilejit-no-such-compiler")
    with pytest.raises(CompileError, match="TILEJIT_CC"):
        compiler.find_cc()


def test_tilejit_cc_is_shell_split(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CC", "gcc -DANSWER=41")
    assert compiler.find_cc() == ["gcc", "-DANSWER=41"]
    out = tmp_path / "a.so"
    compiler.compile_cpu("int answer(void) { return ANSWER + 1; }\n", "answer", None, out)
    assert ctypes.CDLL(str(out)).answer() == 42


def test_compiler_identity_is_memoised():
    cc = compiler.find_cc()
    first = compiler.compiler_identity(cc)
    assert first
    assert "\n" not in first
    assert compiler.compiler_identity(list(cc)) is first


# --- Temporary build directories: removed on every path, a killed build's at the next run ---

SLOW_CC = """#!/bin/sh
case "$*" in *--version*) echo "slow-cc 1.0"; exit 0;; esac
echo started > "$(dirname "$0")/started"
sleep 60
"""

ONE_COMPILE = """
import sys, tilejit
try:
    tilejit.compile(tilejit.Program(name=sys.argv[1], source=sys.argv[2], params=[]))
    print("ok")
except tilejit.CompileError:
    print("CompileError")
"""


def _child_env(tmp_path, **extra):
    import os

    from conftest import REPO_ROOT

    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": os.pathsep.join(paths),
            "TILEJIT_CACHE_DIR": str(tmp_path / "cache"), **extra}


def test_a_killed_compile_leaves_nothing_behind_after_the_next_run(tilejit_cache_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "tmp").mkdir()
    cc = tmp_path / "slow-cc"
    cc.write_text(SLOW_CC)
    cc.chmod(0o755)
    mine = tmp_path / "tmp" / f"tilejit-{os.getuid()}"
    child = subprocess.Popen([sys.executable, "-c", ONE_COMPILE, "slow", "void slow(void) {}"],
                             env=_child_env(tmp_path, TILEJIT_CC=str(cc)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    deadline = time.time() + 120
    while not (tmp_path / "started").exists():
        assert child.poll() is None and time.time() < deadline, child.communicate()
        time.sleep(0.1)
    leftovers = [p.name for p in mine.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(f"cc-{child.pid}-"), leftovers
    os.killpg(child.pid, signal.SIGKILL)  # the compiler too
    child.communicate()
    assert [p.name for p in mine.iterdir()] == leftovers  # killed: nothing removed it
    # A live process's directory, and one of a process in another pid namespace, are kept.
    from tilejit.native._build import scratch

    live = mine / f"cc-{os.getpid()}-{scratch._start_time(os.getpid())}-" \
        f"{scratch._namespace()}-live"
    live.mkdir()
    other_ns = mine / f"cc-{child.pid}-1-1-elsewhere"
    other_ns.mkdir()
    # The next run removes the killed one's; a failed compile removes its own.
    done = subprocess.run([sys.executable, "-c", ONE_COMPILE, "bad", "void bad(void) { oops; }"],
                          env=_child_env(tmp_path), capture_output=True, text=True, timeout=300,
                          check=True)
    assert done.stdout.split() == ["CompileError"], done.stderr
    assert sorted(p.name for p in mine.iterdir()) == sorted([live.name, other_ns.name])
    assert not list((tmp_path / "tmp").glob("tilejit-cc-*"))
