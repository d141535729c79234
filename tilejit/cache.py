"""The kernel artifact cache: keys for kernels, and where and whether they are cached.

Layout under `cache_dir()`::

    kernels/<key[:2]>/<key>/kernel<suffix>   the artifact (a .so, a .cubin, ...)
    kernels/<key[:2]>/<key>/meta.json        its size and sha256, written after it
    kernels/<key[:2]>/<key>.lock             flock()ed while the entry is being built
    kernels/.tmp-*/                          private build directories

Locking, atomic publishing, validation, the sweep of stale build directories and the
fallback to a private cache root when the configured one is unusable are the one
disk-cache implementation tilejit has (`build_tools/disk_cache.py`, which also caches the
core, the wrapper and the benchmark's extensions); this module adds the kernel's key and
`TILEJIT_DISABLE_CACHE`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from ._build import disk_cache, elf

__all__ = ["artifact_key", "cache_dir", "cache_disabled", "get_or_build"]

# Bumped whenever the layout or the meaning of a key changes, so that an old cache is
# ignored rather than misread.
_CACHE_FORMAT = 1

_TRUE_WORDS = ("1", "true", "yes", "on")

# Private build directories made while the cache is disabled; removed at exit.
_private_dirs: list[str] = []


def cache_dir() -> Path:
    """Return the cache root: `$TILEJIT_CACHE_DIR`, else `~/.cache/tilejit`.

    Kernel artifacts live under `cache_dir() / "kernels"`.

    Example:
        >>> os.environ["TILEJIT_CACHE_DIR"] = "/tmp/tj"; cache_dir()
        PosixPath('/tmp/tj')
    """
    return disk_cache.cache_root()


def cache_disabled() -> bool:
    """Return True when `TILEJIT_DISABLE_CACHE` is 1/true/yes/on (any case).

    Example:
        >>> os.environ["TILEJIT_DISABLE_CACHE"] = "Yes"; cache_disabled()
        True
    """
    return os.environ.get("TILEJIT_DISABLE_CACHE", "").strip().lower() in _TRUE_WORDS


def _json_default(value: object) -> object:
    # Only types with one obvious, stable spelling are accepted: a silent `repr()` could
    # put a memory address into a key and make every process miss.
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"artifact_key: cannot hash a value of type {type(value).__name__}")


def artifact_key(**parts: object) -> str:
    """Return the sha256 hex digest of a canonical JSON encoding of `parts`.

    The keyword order does not matter; tuples and lists hash alike. Values must be JSON
    types (or paths, bytes, sets); anything else raises `TypeError`.

    Example:
        >>> artifact_key(source="int f(void){return 1;}", target="cpu", flags=["-O3"])
        '5f0c...'  # 64 hex digits
    """
    text = json.dumps(
        {"tilejit-cache-format": _CACHE_FORMAT, "parts": parts},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_json_default,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_key(key: str, suffix: str) -> None:
    # Keys and suffixes become path components; refusing separators and dots keeps a bad
    # caller from writing outside the cache.
    if len(key) < 3 or not all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        raise ValueError(f"cache key must be 3+ characters of [A-Za-z0-9_-], got {key!r}")
    if suffix and (
        not suffix.startswith(".") or "/" in suffix or os.sep in suffix or suffix in (".", "..")
    ):
        raise ValueError(f"artifact suffix must look like '.so', got {suffix!r}")


def _reset_memo() -> None:
    """Forget every verified artifact, as a new process would (for tests)."""
    disk_cache.reset_memo()


def get_or_build(key: str, build: Callable[[Path], None], suffix: str = ".so",
                 check: Callable[[str], str | None] | None = None) -> Path:
    """Return the path of a valid artifact for `key`, calling `build(path)` on a miss.

    `build` must write the artifact to the path it is given (a fresh file in a private
    directory). Whatever it produces is published atomically; concurrent callers with the
    same key, in any process, wait for one build instead of each running their own. If
    `build` raises, nothing is published and the exception propagates, so a failure is
    retried on the next call rather than cached. A corrupt entry (missing meta.json, size
    or hash mismatch, or refused by `check`: `elf.problem` for a library that will be
    loaded) is deleted and rebuilt. An unusable cache directory moves the process to a
    private one, with one warning (`disk_cache.with_fallback`). With
    `TILEJIT_DISABLE_CACHE` set, every call builds into a new private temporary directory
    and nothing is shared.

    Example:
        >>> key = artifact_key(source=src, target="cpu", flags=[])
        >>> so = get_or_build(key, lambda out: compile_cpu(src, "vec_add", [], out))
        >>> so.name
        'kernel.so'
    """
    _check_key(key, suffix)
    if cache_disabled():
        return _build_private(build, suffix, check)

    def find_or_build() -> Path:
        kernels = cache_dir() / "kernels"
        return disk_cache.get_or_build(kernels / key[:2] / key, "kernel" + suffix, build,
                                       tmp_dir=kernels, check=check)

    return disk_cache.with_fallback(find_or_build)


def store_bytes(data: bytes, suffix: str = ".so", **parts: object) -> Path:
    """`data` as an artifact keyed by its content hash (and `parts`): a copy that no later
    change to the file it came from can alter (prebuilt kernels). A shared library
    (`suffix` ".so") must be whole (`elf.problem`), in the cache as when stored."""
    import hashlib

    key = artifact_key(prebuilt=hashlib.sha256(data).hexdigest(), **parts)
    return get_or_build(key, lambda out: out.write_bytes(data), suffix,
                        check=elf.problem if suffix == ".so" else None)


def _build_private(build: Callable[[Path], None], suffix: str,
                   check: Callable[[str], str | None] | None) -> Path:
    import tempfile

    workdir = tempfile.mkdtemp(prefix="tilejit-")
    target = Path(workdir) / ("kernel" + suffix)
    try:
        build(target)
        if not target.is_file():
            raise RuntimeError(f"the build function did not write {target}")
        problem = check(str(target)) if check is not None else None
        if problem is not None:
            raise RuntimeError(f"the build wrote an unusable {target.name}: {problem}")
    except BaseException:
        _rmtree(workdir)
        raise
    if not _private_dirs:
        import atexit

        atexit.register(_remove_private_dirs)
    _private_dirs.append(workdir)
    return target


def _remove_private_dirs() -> None:
    # A library that is still loaded stays mapped after its file is unlinked, so removing
    # these at exit is safe even while kernels are in use.
    while _private_dirs:
        _rmtree(_private_dirs.pop())


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
