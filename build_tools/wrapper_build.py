"""Building the Cython wrapper extension for the running interpreter, cached on disk, and
importing it.

Cache layout under `cache_root()` (entries as `disk_cache` makes them)::

    wrapper/<abi>/<hash>/_tilejit<EXT_SUFFIX>   the extension module for one interpreter ABI
    wrapper/<abi>/<hash>/meta.json
    wrapper/<abi>/<hash>.lock

`<abi>` is `sys.implementation.cache_tag` joined to EXT_SUFFIX ("cpython-311-cpython-311-
x86_64-linux-gnu"), so every interpreter, free-threaded and debug builds included, gets its
own binary; `<hash>` covers every input that changes the binary (see `source_hash`),
the core library's key included.

The extension holds the Cython code only: it is linked against the core library that
`core_build.build_core_library` makes, the very file the ctypes backend opens, so a
process has one core whichever backends it uses.

This module imports nothing from `tilejit`, so it also works as `build_tools.wrapper_build`
with only the repository root on `sys.path`, and from interpreters where tilejit is not
installed.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import os
import platform
import sys
import sysconfig
import threading
import types
from pathlib import Path

from . import disk_cache, elf, prebuilt_lookup, toolchain
from .core_build import (
    CFLAGS,
    build_core_library,
    build_tools_files,
    core_source_hash,
    load_core_library,
    log,
    notice,
    source_dirs,
    tree_files,
)

__all__ = [
    "WRAPPER_MODULE",
    "abi_tag",
    "build_wrapper",
    "load_wrapper",
    "source_hash",
    "wrapper_path",
]

# The name the extension is imported under. Cython bakes it into the module (class
# `__module__`, tracebacks), and its last component fixes the `PyInit__tilejit` symbol.
WRAPPER_MODULE = "tilejit._tilejit"
_WRAPPER_PYX = "_tilejit.pyx"

# The files that make up the wrapper's source tree; setup.cfg's package data must match.
_WRAPPER_PATTERNS = ("*.pyx", "*.pxd", "*.pxi")

_CYTHON_DIRECTIVES = {"boundscheck": False, "wraparound": False, "initializedcheck": False}

# Hidden visibility keeps the Cython module's own functions private; PyInit__tilejit stays
# exported because CPython's PyMODINIT_FUNC marks it visibility("default"). -fno-plt calls
# the core's functions through the GOT, without a PLT stub per call.
_WRAPPER_CFLAGS = (*CFLAGS, "-fvisibility=hidden", "-fno-plt")

# flock() already excludes other threads of this process, but Cython's compiler keeps
# module-level state and the stderr capture below is process-wide, so Cython runs are also
# serialised within the process.
_cython_lock = threading.Lock()
# Serialises load_wrapper() so that two threads importing at once publish one module.
_load_lock = threading.Lock()


def _resolve_dirs(core_dir: Path | None, wrapper_dir: Path | None) -> tuple[Path, Path]:
    if core_dir is None or wrapper_dir is None:
        default_core, default_wrapper = source_dirs()
        core_dir = default_core if core_dir is None else core_dir
        wrapper_dir = default_wrapper if wrapper_dir is None else wrapper_dir
    return Path(core_dir), Path(wrapper_dir)


def _cython_version() -> str:
    """Cython's version, read from its sources: importing Cython costs a fresh process a
    tenth of a second, and the wrapper's key is computed at every start."""
    import importlib.util
    import re

    if "Cython" in sys.modules:
        return sys.modules["Cython"].__version__
    try:
        spec = importlib.util.find_spec("Cython")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        # The hash must still be computable (it names the entry a build would produce);
        # the build itself then reports the missing Cython.
        return "missing"
    shadow = Path(next(iter(spec.submodule_search_locations))) / "Shadow.py"
    try:
        text = shadow.read_text(encoding="utf-8")
        found = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    except OSError:
        found = None
    if found is None:  # laid out otherwise: ask Cython itself
        import Cython

        return Cython.__version__
    return found.group(1)


def source_hash(core_dir: Path | None = None, wrapper_dir: Path | None = None) -> str:
    """Return the wrapper's cache key: 16 hex digits of a sha256.

    It covers the relative path and contents of every `wrapper/*.pyx`, `wrapper/*.pxd`
    and `wrapper/*.pxi`, the core library's key (`core_source_hash`: the wrapper is linked
    against that very library, so a changed core gives a new wrapper), the Cython version,
    the `build_tools` sources (which hold the flags) and `$TILEJIT_CC`. The interpreter
    ABI is not in it: it names the directory above (see `wrapper_path`).

    Example:
        >>> source_hash()
        '3f9c0a1be2d45c77'
    """
    core_dir, wrapper_dir = _resolve_dirs(core_dir, wrapper_dir)
    extra = (core_source_hash(core_dir), _cython_version(), toolchain.configured_cc())
    return disk_cache.hash_files("tilejit-wrapper", extra, _wrapper_files(wrapper_dir))


def _wrapper_files(wrapper_dir: Path) -> list[tuple[str, Path]]:
    """The files a wrapper is built from: its Cython sources and the build scripts."""
    return [*tree_files(wrapper_dir, "wrapper", _WRAPPER_PATTERNS), *build_tools_files()]


def wrapper_sources_key(core_key: str | None = None) -> str:
    """16 hex digits over the wrapper's sources, the build scripts and the core's key
    (`core_key`, else computed), without the Cython version or the compiler: what a
    prebuilt wrapper is matched by (`prebuilt_lookup.wrapper`), whichever Cython the
    package build used."""
    core_dir, wrapper_dir = _resolve_dirs(None, None)
    key = core_source_hash(core_dir) if core_key is None else core_key
    return disk_cache.hash_files("tilejit-wrapper-sources", (key,), _wrapper_files(wrapper_dir))


def _python() -> str:
    """"CPython 3.11.7 (/usr/bin/python3)": the interpreter a wrapper is built for."""
    version = ".".join(map(str, sys.version_info[:3]))
    return f"{platform.python_implementation()} {version} ({sys.executable})"


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
    entry = disk_cache.cache_root() / "wrapper" / abi_tag() / key
    return entry / (WRAPPER_MODULE.rsplit(".", 1)[1] + _ext_suffix())


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
    log(verbose, f"cythonize {pyx} -> {c_file}")
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
        log(verbose, text)


def _python_include_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    found = []
    for key in ("include", "platinclude"):
        directory = paths.get(key)
        if directory and Path(directory) not in found:
            found.append(Path(directory))
    return found


def _core_link_args(core: Path, wrapper_entry: Path) -> tuple[str, ...]:
    """Link against the cached core library and find it again at run time.

    The wrapper records the core as a dependency (DT_NEEDED, the core's soname) with a
    run path relative to its own directory, `$ORIGIN/../../../core/<key>`. Chosen over
    loading the core with RTLD_GLOBAL before the wrapper: the extension then carries its
    dependency itself, so every way of importing it (installed or editable tilejit, the
    repository on sys.path, any Python 3.10-3.13 loader) gets the same core without a
    preload step, and the core's symbols are not made global for every library loaded
    later (kernels). The path is relative, so a cache root that moves keeps working, and
    no LD_LIBRARY_PATH is needed. The loader knows a library by its soname and file, so
    the ctypes backend opening the core by its path gets this same mapping.
    """
    origin = os.path.relpath(core.parent, wrapper_entry)
    return (str(core), f"-Wl,-rpath,$ORIGIN/{origin}")


def build_wrapper(
    force: bool = False,
    verbose: bool = False,
    *,
    core_dir: Path | None = None,
    wrapper_dir: Path | None = None,
) -> Path:
    """Return the path of the compiled wrapper extension, building it if it is not cached.

    Builds the core library first (`build_core_library`), cythonizes
    `wrapper/_tilejit.pyx` and links it against that library, using `$TILEJIT_CC` (else
    `cc`). `force=True` rebuilds even when cached (the wrapper, not the core);
    `verbose=True` prints the commands and compiler output to stderr. `core_dir` and
    `wrapper_dir` replace the source trees (tests). Raises `RuntimeError` with the failing
    command and its full output when Cython or the compiler fails.

    Example:
        >>> build_wrapper()
        PosixPath('/home/me/.cache/tilejit/wrapper/cpython-311-.../_tilejit.cpython-311-x86_64-linux-gnu.so')
    """
    if core_dir is None and wrapper_dir is None and not force:
        core_key = core_source_hash()
        found = prebuilt_lookup.wrapper(core_key, wrapper_sources_key(core_key), abi_tag())
        if found is not None:
            return found
    core_dir, wrapper_dir = _resolve_dirs(core_dir, wrapper_dir)
    pyx = wrapper_dir / _WRAPPER_PYX
    if not pyx.is_file():
        raise RuntimeError(f"tilejit: wrapper source {pyx} is missing")

    def build_in_cache() -> Path:
        # The core first: should the cache fall back to a private root, both the core and
        # the wrapper (whose run path points at the core) are then made there.
        core = build_core_library(verbose=verbose, core_dir=core_dir)
        target = wrapper_path(core_dir, wrapper_dir)

        def build(output: Path) -> None:
            notice(f"building the Cython wrapper for {_python()}: once per Python and "
                   "tilejit version")
            # Generated C and objects go beside the output, into the cache's private build
            # directory, never into the (possibly read-only) source tree.
            workdir = output.parent
            c_file = workdir / pyx.with_suffix(".c").name
            _cythonize(pyx, wrapper_dir, c_file, verbose)
            include_dirs = [core_dir / "include", core_dir / "src", *_python_include_dirs()]
            toolchain.compile_and_link([c_file], include_dirs, _WRAPPER_CFLAGS, output,
                                       workdir, verbose, _core_link_args(core, target.parent))

        info = {"kind": "wrapper", "name": "tilejit wrapper", "target": sys.implementation.cache_tag,
                "arch": platform.machine()}
        return disk_cache.get_or_build(target.parent, target.name, build, force=force,
                                       log=lambda message: log(verbose, message),
                                       check=elf.problem, info=info)

    return disk_cache.with_fallback(build_in_cache)


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


def load_wrapper(
    verbose: bool = False, *, core_dir: Path | None = None, wrapper_dir: Path | None = None
) -> types.ModuleType:
    """Return the wrapper extension module, building and importing it on first use.

    The module is imported as `tilejit._tilejit` and kept in `sys.modules`; later calls
    return it at once (`core_dir`/`wrapper_dir` are then ignored). A cached file that
    fails its checksum is rebuilt before loading; one the loader still rejects is deleted
    and rebuilt once, and a second failure propagates, as do exceptions raised by the
    module's own initialisation. The core is loaded first (`load_core_library`), so a
    core the loader rejects is rebuilt rather than blamed on the wrapper.

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
        # The core the wrapper links against, loaded (and rebuilt if the loader rejects
        # it) first: a wrapper failing to load for its core's sake is not damaged itself.
        load_core_library(verbose=verbose, core_dir=core_dir)
        path = build_wrapper(verbose=verbose, core_dir=core_dir, wrapper_dir=wrapper_dir)
        try:
            seen = path.stat()
        except FileNotFoundError:
            seen = None
        try:
            spec, module = _open_extension(path)
        except (ImportError, OSError) as exc:
            log(verbose, f"cannot load {path} ({exc}); rebuilding it")
            disk_cache.discard(path, seen, lambda message: log(verbose, message))
            path = build_wrapper(verbose=verbose, core_dir=core_dir, wrapper_dir=wrapper_dir)
            spec, module = _open_extension(path)
        # Errors raised by the module's body are not a damaged file: they propagate
        # without a rebuild that could not fix them.
        return _execute(spec, module)
