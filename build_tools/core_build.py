"""Building the C core as a shared library, cached on disk: the one core of a process.

Cache layout under `cache_root()` (entries as `disk_cache` makes them)::

    core/<core hash>/libtilejit_core-<core hash>.so   the core library
    core/<core hash>/meta.json
    core/<core hash>.lock

Every backend uses this very file: the ctypes backend opens it with ctypes, and the
wrapper extension is linked against it (see `wrapper_build`), so a process holds one core,
one error buffer and one CUDA driver state whichever backends it uses. The library needs
no Python.

This module imports nothing from `tilejit`, so it also works as `build_tools.core_build`
with only the repository root on `sys.path`.
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import sys
from pathlib import Path

from . import disk_cache, elf, prebuilt_lookup, toolchain

__all__ = [
    "build_core_library",
    "core_library_name",
    "core_library_path",
    "core_source_hash",
    "load_core_library",
    "source_dirs",
    "tree_files",
]

# The files that make up the core's source tree. The package data in setup.cfg must list
# the same patterns, or an installed tilejit would hash and compile a different set than a
# checkout.
CORE_PATTERNS = ("include/tilejit/*.h", "include/dlpack/dlpack.h", "include/dlpack/LICENSE",
                 "src/*.c", "src/*.h", "torch_op/*.c", "flags.mk")

# -DNDEBUG matches how setuptools builds extensions: without it CPython's own inline
# accessors (PyTuple_GET_ITEM and friends) keep their assert()s on the per-call path.
CFLAGS = ("-O2", "-fPIC", "-pthread", "-std=gnu11", "-DNDEBUG")
# -Bsymbolic binds the core's calls to its own exported functions inside the library, so
# they skip the PLT and no other library can interpose them, as when the core was compiled
# into the wrapper.
_CORE_LINK_ARGS = ("-Wl,-Bsymbolic",)
# The core's own flags (language, visibility, unwind tables), shared with core/Makefile.
FLAGS_FILE = "flags.mk"


def _core_cflags(core_dir: Path) -> tuple[str, ...]:
    """The cached library's compile flags: optimised, position-independent, the core's own."""
    return ("-O2", "-fPIC", "-DNDEBUG", *core_flags(core_dir))


def core_flags(core_dir: Path | None = None) -> tuple[str, ...]:
    """The flags every build of the core's sources uses, read from ``core/flags.mk``
    (``NAME := flags`` lines, which ``core/Makefile`` includes).

    Example:
        >>> core_flags()
        ('-std=gnu11', '-pthread', '-fvisibility=hidden', '-fexceptions')
    """
    text = (Path(core_dir or source_dirs()[0]) / FLAGS_FILE).read_text()
    flags: list[str] = []
    for line in text.splitlines():
        _, sep, value = line.partition(":=")
        if sep and not line.lstrip().startswith("#"):
            flags += value.split()
    return tuple(flags)


def source_dirs() -> tuple[Path, Path]:
    """Return `(core_dir, wrapper_dir)`, the C core and Cython wrapper source trees.

    Installed, this file is `<site>/tilejit/_build_tools/core_build.py` and the trees are
    its siblings `tilejit/_core` and `tilejit/_wrapper`. In a checkout (editable install, or
    the repository root on `sys.path`) it is `<root>/build_tools/core_build.py` and they
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


def tree_files(root: Path, label: str, patterns: tuple[str, ...]) -> list[tuple[str, Path]]:
    """Return `(name, path)` for each file of `root` matching `patterns`, sorted by name.

    Names are relative to the tree and prefixed by its role, so a checkout, an installed
    copy and a test's private copy of the same sources hash alike.
    """
    found = {}
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file():
                found[f"{label}/{path.relative_to(root).as_posix()}"] = path
    return sorted(found.items())


def build_tools_files() -> list[tuple[str, Path]]:
    """The `build_tools` sources: they hold the flags and recipes, so changing them must
    give new cache entries."""
    return tree_files(Path(__file__).resolve().parent, "build_tools", ("*.py",))


def core_source_hash(core_dir: Path | None = None) -> str:
    """Return the core library's cache key: 16 hex digits of a sha256.

    It covers every `core/include/tilejit/*.h`, the vendored `core/include/dlpack/`,
    `core/src/*.c` and `core/src/*.h`, the `build_tools` sources and `$TILEJIT_CC`;
    not Cython nor the wrapper, so the ctypes
    backend keeps working where Cython is missing or the wrapper does not build.

    Example:
        >>> core_source_hash()
        '0b61d2e7a9f4c318'
    """
    if core_dir is None:
        core_dir = source_dirs()[0]
    files = [*tree_files(Path(core_dir), "core", CORE_PATTERNS), *build_tools_files()]
    return disk_cache.hash_files("tilejit-core", (toolchain.configured_cc(),), files)


def core_library_name(key: str) -> str:
    """The core library's file name (and soname) for cache key `key`."""
    return f"libtilejit_core-{key}.so"


def core_library_path(core_dir: Path | None = None) -> Path:
    """Return where the core shared library for these sources is (or will be) cached.

    Example:
        >>> core_library_path()
        PosixPath('~/.cache/tilejit/core/0b61d2e7a9f4c318/libtilejit_core-0b61d2e7a9f4c318.so')
    """
    return _cached_core(core_source_hash(core_dir))


def _cached_core(key: str) -> Path:
    """Where the core of sources of key `key` is cached."""
    return disk_cache.cache_root() / "core" / key / core_library_name(key)


def notice(message: str) -> None:
    """One line on stderr before a build at run time: the core or the wrapper takes
    seconds to build, and a user should know why the first call waits."""
    print(f"tilejit: {message}", file=sys.stderr, flush=True)


def log(verbose: bool, message: str) -> None:
    if verbose:
        print(f"tilejit: {message}", file=sys.stderr, flush=True)


def build_core_library(
    force: bool = False, verbose: bool = False, *, core_dir: Path | None = None
) -> Path:
    """Return the path of the core built as a shared library, building it if needed.

    Compiles every `core/src/*.c` with `$TILEJIT_CC` (else `cc`). `force=True` rebuilds
    even when cached; `verbose=True` prints the commands and compiler output to stderr.
    `core_dir` replaces the source tree (tests). Raises `RuntimeError` with the failing
    command and its full output when the compiler fails. A cached library that is not a
    whole ELF file (`elf.problem`) is rebuilt; an unusable cache directory moves the
    process to a private one (`disk_cache.with_fallback`).

    Example:
        >>> lib = ctypes.CDLL(str(build_core_library()))
    """
    key = core_source_hash(core_dir)
    if core_dir is None and not force:
        found = prebuilt_lookup.core(key)
        if found is not None:
            return found
    core_dir = source_dirs()[0] if core_dir is None else Path(core_dir)
    sources = sorted((core_dir / "src").glob("*.c"))
    if not sources:
        raise RuntimeError(f"tilejit: no C sources in {core_dir / 'src'}")

    def build_in_cache() -> Path:
        target = _cached_core(key)  # under the cache root in use, which a fallback moves

        def build(output: Path) -> None:
            notice(f"building the C core ({target.name}) for this machine: once per "
                   "tilejit version and compiler, shared by every Python")
            include_dirs = [core_dir / "include", core_dir / "src"]
            # The soname is the file's own name: the wrapper records it as its dependency,
            # and the loader then knows the library ctypes opened by path as the same one.
            link_args = (*_CORE_LINK_ARGS, f"-Wl,-soname,{target.name}")
            # The object files go beside the output, into the cache's private build
            # directory.
            toolchain.compile_and_link(sources, include_dirs, _core_cflags(core_dir), output,
                                       output.parent,
                                       verbose, link_args)

        info = {"kind": "core", "name": "tilejit core", "target": "cpu",
                "arch": platform.machine()}
        return disk_cache.get_or_build(target.parent, target.name, build, force=force, info=info,
                                       log=lambda message: log(verbose, message),
                                       check=elf.problem)

    return disk_cache.with_fallback(build_in_cache)


def adopt_core_library(candidate: Path, sha256: str) -> Path | None:
    """Install ``candidate``, a copy of this tilejit's core library that an export carries,
    as the cached core when none is cached or prebuilt, so that an export loads where the
    core cannot be built (no compiler, a cleared cache). Only a file named as this
    source tree's core and of SHA-256 ``sha256`` (what the export's MANIFEST lists) is
    taken; the cache's own checks follow (a whole ELF file). Returns the cached core, or
    None when nothing was adopted."""
    key = core_source_hash()
    target = _cached_core(key)
    if candidate.name != target.name or prebuilt_lookup.core(key) is not None or \
            target.exists():
        return None
    try:
        data = candidate.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        return None

    def build_in_cache() -> Path:
        info = {"kind": "core", "name": "tilejit core", "target": "cpu",
                "arch": platform.machine()}
        return disk_cache.get_or_build(_cached_core(key).parent, target.name,
                                       lambda output: output.write_bytes(data), info=info,
                                       check=elf.problem)

    return disk_cache.with_fallback(build_in_cache)


def build_torch_op_library(verbose: bool = False) -> Path:
    """Return the path of ``torch_op.so`` for this core (`core/torch_op/torch_op.c`, the
    library an export carries so that torch loads its kernel as an op), building it into
    the cache if needed. It links the core by its soname and finds it in its own
    directory (``$ORIGIN``), where an export puts a copy of the core.
    """
    core = build_core_library(verbose=verbose)
    core_dir = source_dirs()[0]
    key = core.name[len("libtilejit_core-"):-len(".so")]

    def build_in_cache() -> Path:
        entry = disk_cache.cache_root() / "core" / f"{key}-torch_op"

        def build(output: Path) -> None:
            link_args = (f"-L{core.parent}", f"-l:{core.name}", "-Wl,-rpath,$ORIGIN")
            toolchain.compile_and_link([core_dir / "torch_op" / "torch_op.c"],
                                       [core_dir / "include"], _core_cflags(core_dir), output,
                                       output.parent, verbose, link_args)

        info = {"kind": "torch_op", "name": "tilejit torch_op.so", "target": "cpu",
                "arch": platform.machine()}
        return disk_cache.get_or_build(entry, "torch_op.so", build, info=info,
                                       log=lambda message: log(verbose, message),
                                       check=elf.problem)

    return disk_cache.with_fallback(build_in_cache)


def load_core_library(verbose: bool = False, *, core_dir: Path | None = None
                      ) -> tuple[Path, ctypes.CDLL]:
    """Return the core library's path and the library opened with ctypes, building it if
    needed. A cached file the loader rejects although it passed the cache's checks is
    deleted and rebuilt once; a second failure propagates (`OSError`).

    Example:
        >>> path, lib = load_core_library()
    """
    path = build_core_library(verbose=verbose, core_dir=core_dir)
    try:
        seen = path.stat()
    except FileNotFoundError:
        seen = None
    try:
        return path, ctypes.CDLL(str(path))
    except OSError as exc:
        log(verbose, f"cannot load {path} ({exc}); rebuilding it")
        disk_cache.discard(path, seen, lambda message: log(verbose, message))
    path = build_core_library(verbose=verbose, core_dir=core_dir)
    return path, ctypes.CDLL(str(path))

