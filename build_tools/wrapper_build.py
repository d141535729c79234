"""Compiling the Cython wrapper and the C core for the running interpreter, cached on disk.

Cache layout under `cache_root()`::

    wrapper/<abi>/<hash>/_tilejit<EXT_SUFFIX>   the extension module for one interpreter ABI
    wrapper/<abi>/<hash>.lock                   flock()ed while that entry is being built
    core/<core hash>/libtilejit_core-<core hash>.so   the core alone, for the ctypes backend
    core/<core hash>.lock

`<abi>` is `sys.implementation.cache_tag` joined to EXT_SUFFIX ("cpython-311-cpython-311-
x86_64-linux-gnu"), so every interpreter, free-threaded and debug builds included, gets its
own binary; `<hash>` covers every input that changes the binary (see `source_hash`).

An entry is published by `os.replace` of a finished file, so a file at the final path is
always complete: the fast path is one `stat` with no lock. Only a miss takes the lock, and
re-checks after getting it, so many processes racing on an empty cache build once.

This module imports nothing from `tilejit`, so it also works as `build_tools.wrapper_build`
with only the repository root on `sys.path`, and from interpreters where tilejit is not
installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import io
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = [
    "WRAPPER_MODULE",
    "abi_tag",
    "build_core_library",
    "build_wrapper",
    "cache_root",
    "core_library_path",
    "core_source_hash",
    "load_wrapper",
    "source_dirs",
    "source_hash",
    "wrapper_path",
]

# The name the extension is imported under. Cython bakes it into the module (class
# `__module__`, tracebacks), and its last component fixes the `PyInit__tilejit` symbol.
WRAPPER_MODULE = "tilejit._tilejit"
_WRAPPER_PYX = "_tilejit.pyx"

# The files that make up each source tree. The package data in setup.cfg must list the same
# patterns, or an installed tilejit would hash and compile a different set than a checkout.
_CORE_PATTERNS = ("include/tilejit/*.h", "src/*.c", "src/*.h")
_WRAPPER_PATTERNS = ("*.pyx", "*.pxd", "*.pxi")

_CYTHON_DIRECTIVES = {"boundscheck": False, "wraparound": False, "initializedcheck": False}

# -DNDEBUG matches how setuptools builds extensions: without it CPython's own inline
# accessors (PyTuple_GET_ITEM and friends) keep their assert()s on the per-call path.
_CFLAGS = ("-O2", "-fPIC", "-pthread", "-std=gnu11", "-DNDEBUG")
# Hidden visibility keeps the core's tj_ symbols private to the wrapper, so calls into the
# core skip the PLT and cannot be interposed by another library; PyInit__tilejit stays
# exported because CPython's PyMODINIT_FUNC marks it visibility("default").
_WRAPPER_CFLAGS = (*_CFLAGS, "-fvisibility=hidden")
# The core library is opened with ctypes, which needs its tj_ symbols exported; the public
# header has no export macro, so this build keeps the default visibility.
_CORE_LIBRARY_CFLAGS = _CFLAGS
_LDFLAGS = ("-shared", "-pthread")
_LIBS = ("-ldl",)

_TMP_SUFFIX = ".tmp"

# flock() already excludes other threads of this process (each open() is its own lock
# holder), but Cython's compiler keeps module-level state and the stderr capture below is
# process-wide, so Cython runs are also serialised within the process.
_cython_lock = threading.Lock()
# Serialises load_wrapper() so that two threads importing at once publish one module.
_load_lock = threading.Lock()


def source_dirs() -> tuple[Path, Path]:
    """Return `(core_dir, wrapper_dir)`, the C core and Cython wrapper source trees.

    Installed, this file is `<site>/tilejit/_build_tools/wrapper_build.py` and the trees are
    its siblings `tilejit/_core` and `tilejit/_wrapper`. In a checkout (editable install, or
    the repository root on `sys.path`) it is `<root>/build_tools/wrapper_build.py` and they
    are `<root>/core` and `<root>/wrapper`.

    Example:
        >>> source_dirs()
        (PosixPath('/src/tilejit/core'), PosixPath('/src/tilejit/wrapper'))
    """
    parent = Path(__file__).resolve().parent.parent
    candidates = ((parent / "_core", parent / "_wrapper"), (parent / "core", parent / "wrapper"))
    for core_dir, wrapper_dir in candidates:
        if (core_dir / "include" / "tilejit").is_dir() and wrapper_dir.is_dir():
            return core_dir, wrapper_dir
    tried = ", ".join(f"{core} + {wrapper}" for core, wrapper in candidates)
    raise RuntimeError(f"tilejit: cannot find the core and wrapper sources (tried {tried})")


def _resolve_dirs(core_dir: Path | None, wrapper_dir: Path | None) -> tuple[Path, Path]:
    if core_dir is None or wrapper_dir is None:
        default_core, default_wrapper = source_dirs()
        core_dir = default_core if core_dir is None else core_dir
        wrapper_dir = default_wrapper if wrapper_dir is None else wrapper_dir
    return Path(core_dir), Path(wrapper_dir)


def _tree_files(root: Path, label: str, patterns: tuple[str, ...]) -> list[tuple[str, Path]]:
    # Names are relative to the tree and prefixed by its role, so a checkout, an installed
    # copy and a test's private copy of the same sources hash alike.
    found = {}
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file():
                found[f"{label}/{path.relative_to(root).as_posix()}"] = path
    return sorted(found.items())


def _build_tools_files() -> list[tuple[str, Path]]:
    # The flags and the compile recipe live here: changing them must give a new cache entry.
    return _tree_files(Path(__file__).resolve().parent, "build_tools", ("*.py",))


def _cython_version() -> str:
    try:
        import Cython
    except ImportError:
        # The hash must still be computable (it names the entry a build would produce);
        # the build itself then reports the missing Cython.
        return "missing"
    return Cython.__version__


def _configured_cc() -> str:
    return os.environ.get("TILEJIT_CC", "").strip()


def _digest(kind: str, extra: tuple[str, ...], files: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()

    def feed(data: bytes) -> None:
        # Length prefixes keep ("ab", "c") and ("a", "bc") from hashing alike.
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    feed(kind.encode())
    for value in extra:
        feed(value.encode())
    for name, path in files:
        feed(name.encode())
        feed(path.read_bytes())
    return digest.hexdigest()[:16]


def source_hash(core_dir: Path | None = None, wrapper_dir: Path | None = None) -> str:
    """Return the wrapper's cache key: 16 hex digits of a sha256.

    It covers the relative path and contents of every `wrapper/*.pyx`, `wrapper/*.pxd`,
    `core/include/tilejit/*.h`, `core/src/*.c` and `core/src/*.h`, the Cython version, the
    `build_tools` sources (which hold the flags) and `$TILEJIT_CC`. The interpreter ABI is
    not in it: it names the directory above (see `wrapper_path`).

    Example:
        >>> source_hash()
        '3f9c0a1be2d45c77'
    """
    core_dir, wrapper_dir = _resolve_dirs(core_dir, wrapper_dir)
    files = [
        *_tree_files(wrapper_dir, "wrapper", _WRAPPER_PATTERNS),
        *_tree_files(core_dir, "core", _CORE_PATTERNS),
        *_build_tools_files(),
    ]
    return _digest("tilejit-wrapper", (_cython_version(), _configured_cc()), files)


def core_source_hash(core_dir: Path | None = None) -> str:
    """Return the core library's cache key, like `source_hash` without wrapper and Cython.

    The core library serves the ctypes backend, which must keep working where Cython is
    missing or the wrapper does not build, so its key depends on neither.

    Example:
        >>> core_source_hash()
        '0b61d2e7a9f4c318'
    """
    if core_dir is None:
        core_dir = source_dirs()[0]
    files = [*_tree_files(Path(core_dir), "core", _CORE_PATTERNS), *_build_tools_files()]
    return _digest("tilejit-core", (_configured_cc(),), files)


def cache_root() -> Path:
    """Return the cache root: `$TILEJIT_CACHE_DIR`, else `~/.cache/tilejit`.

    Example:
        >>> os.environ["TILEJIT_CACHE_DIR"] = "/tmp/tj"; cache_root()
        PosixPath('/tmp/tj')
    """
    configured = os.environ.get("TILEJIT_CACHE_DIR", "").strip()
    return Path(configured or "~/.cache/tilejit").expanduser()


def _ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def abi_tag() -> str:
    """Return the directory name that separates interpreters in the wrapper cache.

    Example:
        >>> abi_tag()
        'cpython-311-cpython-311-x86_64-linux-gnu'
    """
    # EXT_SUFFIX carries the ABI flags ("313t" free-threaded, "d" debug) that cache_tag lacks.
    suffix = _ext_suffix().lstrip(".")
    if "." in suffix:
        suffix = suffix.rsplit(".", 1)[0]
    return f"{sys.implementation.cache_tag}-{suffix}"


def wrapper_path(core_dir: Path | None = None, wrapper_dir: Path | None = None) -> Path:
    """Return where the wrapper for this interpreter and these sources is (or will be) cached.

    Example:
        >>> wrapper_path()
        PosixPath('~/.cache/tilejit/wrapper/cpython-311-.../3f9c0a1be2d45c77/_tilejit.cpython-311-x86_64-linux-gnu.so')
    """
    key = source_hash(core_dir, wrapper_dir)
    entry = cache_root() / "wrapper" / abi_tag() / key
    return entry / (WRAPPER_MODULE.rsplit(".", 1)[1] + _ext_suffix())


def core_library_path(core_dir: Path | None = None) -> Path:
    """Return where the core shared library for these sources is (or will be) cached.

    Example:
        >>> core_library_path()
        PosixPath('~/.cache/tilejit/core/0b61d2e7a9f4c318/libtilejit_core-0b61d2e7a9f4c318.so')
    """
    key = core_source_hash(core_dir)
    return cache_root() / "core" / key / f"libtilejit_core-{key}.so"


@contextlib.contextmanager
def _entry_lock(entry: Path) -> Iterator[None]:
    # The lock file sits beside the entry, not in it, so an entry directory only ever holds
    # finished files and temporaries of the current lock holder. Lock files are never
    # deleted: removing one while another process waits on it would split the lock in two.
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(entry.parent / f"{entry.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _log(verbose: bool, message: str) -> None:
    if verbose:
        print(f"tilejit: {message}", file=sys.stderr, flush=True)


def _build_once(
    target: Path, build: Callable[[Path, Path], None], force: bool, verbose: bool
) -> Path:
    """Build `target` unless it exists, under the entry lock, publishing it atomically.

    `build(output, workdir)` writes the finished file to `output`, using `workdir` for
    intermediate files.
    """
    if not force and target.exists():
        return target
    entry = target.parent
    with _entry_lock(entry):
        # Another process may have published the file while this one waited for the lock.
        if not force and target.exists():
            _log(verbose, f"using {target}, built by another process")
            return target
        entry.mkdir(parents=True, exist_ok=True)
        # Holding the lock means no build into this entry is running, so any temporary
        # left here belongs to a build that was killed.
        for stale in entry.glob(f".*{_TMP_SUFFIX}"):
            stale.unlink(missing_ok=True)
        partial = entry / f".{target.name}.{os.getpid()}{_TMP_SUFFIX}"
        _log(verbose, f"building {target}")
        try:
            with tempfile.TemporaryDirectory(prefix="tilejit-build-") as workdir:
                build(partial, Path(workdir))
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def _find_cc() -> list[str]:
    configured = _configured_cc()
    if configured:
        return shlex.split(configured)
    return ["cc"] if shutil.which("cc") is not None or shutil.which("gcc") is None else ["gcc"]


def _compiler_env() -> dict[str, str]:
    # The C locale keeps diagnostics in English and ASCII, whatever the user's locale.
    return {**os.environ, "LC_ALL": "C"}


def _run(command: list[str], verbose: bool) -> None:
    _log(verbose, shlex.join(command))
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            errors="replace",
            env=_compiler_env(),
        )
    except OSError as exc:
        raise RuntimeError(
            f"tilejit: cannot run the C compiler ({exc}); set TILEJIT_CC to a working one\n"
            f"  command: {shlex.join(command)}"
        ) from exc
    output = (done.stderr + done.stdout).strip()
    if done.returncode != 0:
        raise RuntimeError(
            f"tilejit: C compiler failed with exit status {done.returncode}\n"
            f"  command: {shlex.join(command)}\n{output}"
        )
    if output:
        _log(verbose, output)


def _compile_and_link(
    sources: list[Path],
    include_dirs: list[Path],
    cflags: tuple[str, ...],
    output: Path,
    workdir: Path,
    verbose: bool,
) -> None:
    cc = _find_cc()
    includes = [f"-I{directory}" for directory in include_dirs]
    commands = []
    objects = []
    for index, source in enumerate(sources):
        # The index keeps two sources with one stem (a.c and the generated a.c) apart.
        obj = workdir / f"{index}-{source.stem}.o"
        commands.append([*cc, *cflags, *includes, "-c", str(source), "-o", str(obj)])
        objects.append(str(obj))
    # Translation units compile in parallel: the Cython output is the slowest and the core
    # files finish beside it, so a cold build costs about one file's compile time.
    with ThreadPoolExecutor(max_workers=max(1, min(len(commands), os.cpu_count() or 1))) as pool:
        for future in [pool.submit(_run, command, verbose) for command in commands]:
            future.result()
    _run([*cc, *_LDFLAGS, "-o", str(output), *objects, *_LIBS], verbose)


def _cythonize(pyx: Path, wrapper_dir: Path, c_file: Path, verbose: bool) -> None:
    try:
        from Cython.Compiler import Errors
        from Cython.Compiler.Main import CompilationOptions, compile_single, default_options
    except ImportError as exc:
        raise RuntimeError(
            f"tilejit: Cython is needed to build the wrapper ({exc}); pip install 'Cython>=3.0'"
        ) from exc
    options = CompilationOptions(
        default_options,
        output_file=str(c_file),
        language_level=3,
        include_path=[str(wrapper_dir)],
        compiler_directives=dict(_CYTHON_DIRECTIVES),
    )
    messages = io.StringIO()
    _log(verbose, f"cythonize {pyx} -> {c_file}")
    with _cython_lock, contextlib.redirect_stderr(messages), contextlib.redirect_stdout(messages):
        try:
            # An explicit module name keeps Cython from deriving one from __init__.py files
            # around the source, which differ between a checkout and an installed copy.
            result = compile_single(str(pyx), options, full_module_name=WRAPPER_MODULE)
            error = None
        except (Errors.PyrexError, Errors.AbortError, Errors.InternalError, OSError) as exc:
            # Cython reports most errors by count, but aborts on some by raising.
            result, error = None, exc
    text = messages.getvalue().strip()
    if error is not None or result is None or result.num_errors or not result.c_file:
        detail = f"{type(error).__name__}: {error}\n" if error is not None else ""
        raise RuntimeError(f"tilejit: Cython failed to compile {pyx}\n{detail}{text}") from error
    if text:
        _log(verbose, text)


def _python_include_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    found = []
    for key in ("include", "platinclude"):
        directory = paths.get(key)
        if directory and Path(directory) not in found:
            found.append(Path(directory))
    return found


def build_wrapper(
    force: bool = False,
    verbose: bool = False,
    *,
    core_dir: Path | None = None,
    wrapper_dir: Path | None = None,
) -> Path:
    """Return the path of the compiled wrapper extension, building it if it is not cached.

    Cythonizes `wrapper/_tilejit.pyx` and compiles it with every `core/src/*.c` using
    `$TILEJIT_CC` (else `cc`). `force=True` rebuilds even when cached; `verbose=True`
    prints the commands and compiler output to stderr. `core_dir` and `wrapper_dir`
    replace the source trees (tests). Raises `RuntimeError` with the failing command and
    its full output when Cython or the compiler fails.

    Example:
        >>> build_wrapper()
        PosixPath('/home/me/.cache/tilejit/wrapper/cpython-311-.../_tilejit.cpython-311-x86_64-linux-gnu.so')
    """
    core_dir, wrapper_dir = _resolve_dirs(core_dir, wrapper_dir)
    pyx = wrapper_dir / _WRAPPER_PYX
    if not pyx.is_file():
        raise RuntimeError(f"tilejit: wrapper source {pyx} is missing")
    target = wrapper_path(core_dir, wrapper_dir)

    def build(output: Path, workdir: Path) -> None:
        c_file = workdir / pyx.with_suffix(".c").name
        _cythonize(pyx, wrapper_dir, c_file, verbose)
        sources = [c_file, *sorted((core_dir / "src").glob("*.c"))]
        include_dirs = [core_dir / "include", core_dir / "src", *_python_include_dirs()]
        _compile_and_link(sources, include_dirs, _WRAPPER_CFLAGS, output, workdir, verbose)

    return _build_once(target, build, force, verbose)


def build_core_library(
    force: bool = False, verbose: bool = False, *, core_dir: Path | None = None
) -> Path:
    """Return the path of the core built alone as a shared library, building it if needed.

    The library needs no Python and exports the public `tj_` functions for ctypes. Same
    caching, locking and error rules as `build_wrapper`.

    Example:
        >>> lib = ctypes.CDLL(str(build_core_library()))
    """
    core_dir = source_dirs()[0] if core_dir is None else Path(core_dir)
    sources = sorted((core_dir / "src").glob("*.c"))
    if not sources:
        raise RuntimeError(f"tilejit: no C sources in {core_dir / 'src'}")
    target = core_library_path(core_dir)

    def build(output: Path, workdir: Path) -> None:
        include_dirs = [core_dir / "include", core_dir / "src"]
        _compile_and_link(sources, include_dirs, _CORE_LIBRARY_CFLAGS, output, workdir, verbose)

    return _build_once(target, build, force, verbose)


def _open_extension(path: Path) -> tuple[importlib.machinery.ModuleSpec, types.ModuleType]:
    """Return `(spec, module)` for the extension at `path`, not yet executed.

    module_from_spec dlopen()s the file and runs PyInit, so a corrupt or truncated file
    fails here (ImportError/OSError), apart from errors of the module's own body.
    """
    spec = importlib.util.spec_from_file_location(WRAPPER_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"tilejit: {path} is not loadable as an extension module")
    return spec, importlib.util.module_from_spec(spec)


def _execute(spec: importlib.machinery.ModuleSpec, module: types.ModuleType) -> types.ModuleType:
    sys.modules[WRAPPER_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(WRAPPER_MODULE, None)
        raise
    return module


def _file_identity(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_ino, info.st_size, info.st_mtime_ns


def _discard(path: Path, seen: os.stat_result | None, verbose: bool) -> None:
    # Only the very file that failed is removed: if another process already replaced it
    # with a fresh build, that build is kept.
    with _entry_lock(path.parent):
        try:
            current = path.stat()
        except FileNotFoundError:
            return
        if seen is None or _file_identity(current) == _file_identity(seen):
            _log(verbose, f"removing unloadable {path}")
            path.unlink(missing_ok=True)


def load_wrapper(
    verbose: bool = False, *, core_dir: Path | None = None, wrapper_dir: Path | None = None
) -> types.ModuleType:
    """Return the wrapper extension module, building and importing it on first use.

    The module is imported as `tilejit._tilejit` and kept in `sys.modules`; later calls
    return it at once (`core_dir`/`wrapper_dir` are then ignored). A cached file that
    the loader rejects (corrupt, truncated) is deleted and rebuilt once; a second failure
    propagates, and so do exceptions raised by the module's own initialisation.

    Example:
        >>> _tilejit = load_wrapper()
    """
    module = sys.modules.get(WRAPPER_MODULE)
    if module is not None:
        return module
    with _load_lock:
        module = sys.modules.get(WRAPPER_MODULE)
        if module is not None:
            return module
        path = build_wrapper(verbose=verbose, core_dir=core_dir, wrapper_dir=wrapper_dir)
        try:
            seen = path.stat()
        except FileNotFoundError:
            seen = None
        try:
            spec, module = _open_extension(path)
        except (ImportError, OSError) as exc:
            _log(verbose, f"cannot load {path} ({exc}); rebuilding it")
            _discard(path, seen, verbose)
            path = build_wrapper(verbose=verbose, core_dir=core_dir, wrapper_dir=wrapper_dir)
            spec, module = _open_extension(path)
        # Errors raised by the module's body are not a damaged file: they propagate
        # without a rebuild that could not fix them.
        return _execute(spec, module)
