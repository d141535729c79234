"""Shared fixtures for the pytest suites.

Every test session gets one private kernel cache (`TILEJIT_CACHE_DIR` under pytest's
temporary directory): nothing ever touches `~/.cache/tilejit`, and because the directory
is shared by the whole session, each distinct kernel (and the wrapper) compiles once.
Inductor's cache is the session's own as well (`TORCHINDUCTOR_CACHE_DIR`).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Running pytest from anywhere must test this checkout, not some other installed tilejit.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# Variables that change what tilejit compiles or where it caches; a developer's shell
# settings must not leak into the tests.
_TILEJIT_ENV = (
    "TILEJIT_CACHE_DIR",
    "TILEJIT_DISABLE_CACHE",
    "TILEJIT_CC",
    "TILEJIT_CXX",
    "TILEJIT_COMPILE_FLAGS",
    "TILEJIT_TARGET",
    "TILEJIT_EXECUTION_BACKEND",
    "TILEJIT_VERBOSE",
    "TILEJIT_CUDA_ARCH",
    "TILEJIT_CUDA_COMPILER",
    "TILEJIT_REMOTE_CACHE",
    "TILEJIT_REMOTE_CACHE_TIMEOUT",
    "TILEJIT_REMOTE_CACHE_WAIT",
    "TILEJIT_REMOTE_CACHE_KEY",
)


def inductor_blocked() -> str:
    """Why torch's Inductor cannot build here, or "": it compiles and links C++ with the
    paths of torch's headers and libraries, Python's headers and its own cache unquoted,
    so a space in any of them breaks every Inductor build (plain ``torch.compile`` fails
    there too). Tests that fail that way then skip, saying so (``pytest_runtest_call``)."""
    import sysconfig
    import tempfile

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return ""
    paths = {"torch": os.path.dirname(spec.origin),
             "Python's headers": sysconfig.get_paths().get("include", ""),
             "Inductor's cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR", tempfile.gettempdir())}
    for what, path in paths.items():
        if " " in path:
            return (f"torch's Inductor cannot build C++ under a path with a space ({what}: "
                    f"{path!r}); plain torch.compile fails there too. Install torch (the venv) "
                    f"under a path without spaces to run this test")
    return ""


_INDUCTOR_FAILURES = ("InductorError", "CppCompileError", "BackendCompilerFailed")


def _an_inductor_build_failed(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = f"{type(exc).__name__} {exc}"
        if any(name in text for name in _INDUCTOR_FAILURES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that fails because Inductor cannot build under a path with a space
    (``inductor_blocked``) is skipped with that reason; everywhere else nothing changes."""
    try:
        return (yield)
    except Exception as exc:
        blocked = inductor_blocked()
        if blocked and _an_inductor_build_failed(exc):
            pytest.skip(blocked)
        raise


def no_nvrtc() -> str:
    """Why NVRTC (an optional package: the CUDA toolkit's, or the nvidia-cuda-nvrtc wheel's)
    cannot be loaded here, or "" when it can: tests that compile with it skip without it."""
    from tilejit.builder import cuda_compiler

    try:
        cuda_compiler._Nvrtc.get()
    except Exception as exc:  # noqa: BLE001 - CompileError saying where it looked
        return str(exc).splitlines()[0]
    return ""


@pytest.fixture(scope="session", autouse=True)
def tilejit_cache_dir(tmp_path_factory) -> Path:
    """The session's kernel cache; the tilejit environment is cleared around it."""
    saved = {name: os.environ.pop(name) for name in (*_TILEJIT_ENV, "TORCHINDUCTOR_CACHE_DIR")
             if name in os.environ}
    root = tmp_path_factory.mktemp("tilejit-cache")
    os.environ["TILEJIT_CACHE_DIR"] = str(root)
    # Inductor's caches too: a graph compiled by another run (another tilejit) must not
    # stand in for the one this run compiles.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    try:
        yield root
    finally:
        for name in (*_TILEJIT_ENV, "TORCHINDUCTOR_CACHE_DIR"):
            os.environ.pop(name, None)
        os.environ.update(saved)


BACKENDS = ("cython", "dlpack", "ctypes")


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    """Every test that builds kernels runs once per execution backend: all three must give
    the same results and the same errors (docs/backends.md)."""
    return request.param


@pytest.fixture(scope="module")
def build(tilejit_cache_dir, backend):
    """``build(name, params, source, out_idx=None, **compile_options)`` -> JITKernel, behind
    the module's current ``backend`` unless ``execution_backend`` is given.

    >>> k = build("vec_add", [T.Buffer((n,), "float32", name="A")], SRC, out_idx=-1)
    """
    import tilejit

    def make(name, params, source, out_idx=None, **options):
        options.setdefault("execution_backend", backend)
        program = tilejit.Program(name=name, params=params, source=source)
        return tilejit.compile(program, out_idx=out_idx, **options)

    return make


# The start of a child's code for a process with torch and nothing of tilejit: importing
# tilejit there fails (what a deployment that has only torch and an export sees).
NO_TILEJIT = """
import sys
class _NoTilejit:
    def find_spec(self, name, path=None, target=None):
        if name == "tilejit" or name.startswith("tilejit."):
            raise ImportError("tilejit is not installed in this process")
sys.meta_path.insert(0, _NoTilejit())
import torch
"""


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The environment for a child Python that must import this checkout's tilejit."""
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.update(overrides)
    return env


class Background:
    """A long child process a test checks: started as soon as the session's tests are
    collected (when a selected test is marked ``@pytest.mark.background(run)``), so that
    it runs on another core while the other tests run, and waited for by the test
    (``run.result()``). ``prepare(work)`` returns the command's argv, environment and
    working directory, or a string: why it cannot run (the test then skips, or fails,
    as it decides from that string); ``work`` (``run.work``) is a directory of the run's
    own, removed when the session ends. Output goes to files, never a pipe nobody
    reads."""

    def __init__(self, prepare, timeout: float):
        self._prepare = prepare
        self._timeout = timeout
        self._process = None
        self._why_not = None
        self._files = None
        self.work = None

    def start(self) -> None:
        import tempfile

        if self._process is not None or self._why_not is not None:
            return
        self.work = Path(tempfile.mkdtemp(prefix="tilejit-background-"))
        prepared = self._prepare(self.work)
        if isinstance(prepared, str):
            self._why_not = prepared
            return
        argv, env, cwd = prepared
        # Open until result() reads them back and closes them.
        self._files = (tempfile.TemporaryFile("w+"),  # noqa: SIM115
                       tempfile.TemporaryFile("w+"))  # noqa: SIM115
        self._process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._files[0],
                                         stderr=self._files[1], text=True)

    def result(self) -> subprocess.CompletedProcess | str:
        """The finished process (stdout and stderr read back), or why it could not run."""
        self.start()
        if self._why_not is not None:
            return self._why_not
        try:
            code = self._process.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            code = -9
        out, err = (self._read(f) for f in self._files)
        return subprocess.CompletedProcess(self._process.args, code, out, err)

    @staticmethod
    def _read(file) -> str:
        with file:
            file.seek(0)
            return file.read()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self.work is not None:
            import shutil

            shutil.rmtree(self.work, ignore_errors=True)


_started: list[Background] = []


def pytest_collection_finish(session) -> None:
    """Starts the background runs of the selected tests (``-k``/``-m`` applied)."""
    for item in session.items:
        marker = item.get_closest_marker("background")
        if marker is not None and not session.config.option.collectonly:
            run = marker.args[0]
            run.start()
            _started.append(run)


def pytest_sessionfinish(session) -> None:
    for run in _started:  # a process still running: its test never ran (-x, ^C)
        run.stop()


def python_calls(fn) -> list[tuple[str, str, str]]:
    """``(file, module, function)`` of every Python function ``fn()`` calls, in order."""
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append((frame.f_code.co_filename, frame.f_globals.get("__name__", ""),
                         frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def clean_subprocess_env(cache_dir: Path, **overrides: str) -> dict[str, str]:
    """`subprocess_env` without the developer's tilejit settings, caching in ``cache_dir``:
    for a child started before the session's own cache exists (`Background`)."""
    env = {name: value for name, value in subprocess_env().items() if name not in _TILEJIT_ENV}
    env["TILEJIT_CACHE_DIR"] = str(cache_dir)
    env.update(overrides)
    return env


@pytest.fixture(scope="session")
def child_env():
    """``child_env(**overrides)``: see `subprocess_env`."""
    return subprocess_env


def run_python(*argv: str, timeout: float = 600, **overrides: str) -> str:
    """The stdout of ``python *argv`` run as a child that imports this checkout's tilejit
    (`subprocess_env` with ``overrides``), which must exit 0 (its stderr says why not)."""
    done = subprocess.run([sys.executable, *argv], env=subprocess_env(**overrides),
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def child_python():
    """``child_python(*argv, timeout=600, **overrides) -> stdout``: see `run_python`."""
    return run_python


@pytest.fixture(scope="module")
def vec_add(build):
    """``vec_add(A, B) -> C`` over float32 vectors of any length n, behind the module's
    backend."""
    from kernels import VEC_ADD

    from tilejit import T

    n = T.symbol("n")
    return build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                             T.Buffer((n,), "float32", name="B", const=True),
                             T.Buffer((n,), "float32", name="C")], VEC_ADD, out_idx=-1)


def assert_reads_back(original, loaded) -> None:
    """``loaded`` (``tilejit.load`` of ``original``'s export) has the signature ``original``
    was compiled with: the core read the export's signature.tj once, and what it kept
    (``tj_kernel_*_info``, ``tj_kernel_export_*``) is what Python was told. The same holds
    for the core kernel ``original`` built in this process."""
    from tilejit.builder.export import _spec

    mine, theirs = original.artifact.signature, loaded.artifact.signature
    assert theirs.spec == mine.spec
    assert _spec(original._core_kernel.declared(), original.name) == mine.spec
    assert (theirs.out_idx, theirs.functions, theirs.entry, theirs.names) == (
        mine.out_idx, mine.functions, mine.entry, mine.names)
    assert [(s.name, s.divisibility, s.dtype) for s in theirs.symbols] == [
        (s.name, s.divisibility, s.dtype) for s in mine.symbols]
    assert [repr(p) for p in loaded.program.params] == [repr(p) for p in original.program.params]


# ---- The fake CUDA driver (tests/fake_cuda) ------------------------------------------------


def load_fakes():
    """tests/fake_cuda/fakes.py, imported once by file path (tests/ is not a package)."""
    name = "tilejit_test_fakes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parent / "fake_cuda" / "fakes.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def fake_driver_path(tmp_path_factory):
    return load_fakes().build_fake_driver(tmp_path_factory.mktemp("fake-cuda"))


@pytest.fixture(scope="module")
def driver(fake_driver_path):
    """The fake driver, loaded by the core (TILEJIT_LIBCUDA) for the module's tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEJIT_LIBCUDA", str(fake_driver_path))
        yield load_fakes().FakeDriver(fake_driver_path)


@pytest.fixture
def fake(driver):
    """The fake driver, with no records, no current context, two devices of capability 8.0."""
    driver.reset()
    driver.set_current(-1)
    return driver


@pytest.fixture(scope="session")
def logging_cc(tmp_path_factory):
    """A C compiler that appends its arguments to $TILEJIT_CC_LOG (and sleeps
    $TILEJIT_CC_SLEEP seconds, for a slow compile), then runs cc.

    One script for the whole session: its path is part of the core's and the wrapper's
    cache keys, so the tests and child processes that use it share one build of each.
    """
    script = tmp_path_factory.mktemp("cc") / "logging-cc"
    script.write_text('#!/bin/sh\n'
                      'if [ -n "$TILEJIT_CC_LOG" ]; then echo "$*" >> "$TILEJIT_CC_LOG"; fi\n'
                      'if [ -n "$TILEJIT_CC_SLEEP" ]; then sleep "$TILEJIT_CC_SLEEP"; fi\n'
                      'exec cc "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture
def cc_log(tmp_path, monkeypatch, logging_cc):
    """Every compiler run of this test (and of its child processes) is appended to the
    returned log file."""
    log = tmp_path / "cc.log"
    log.touch()
    monkeypatch.setenv("TILEJIT_CC", str(logging_cc))
    monkeypatch.setenv("TILEJIT_CC_LOG", str(log))
    return log


def compiler_runs(log: Path, kernel: str) -> int:
    """How many logged compiler runs built ``kernel`` (its source ``<kernel>.c``; not
    ``--version`` probes, nor a link whose output is named ``<kernel>.cpython-...so``)."""
    return sum(f"/{kernel}.c " in f"{line} " for line in log.read_text().splitlines())
