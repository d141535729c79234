"""The on-disk kernel artifact cache.

Layout under `cache_dir()`::

    kernels/<key[:2]>/<key>/kernel<suffix>   the artifact (a .so, a .cubin, ...)
    kernels/<key[:2]>/<key>/meta.json        its size and sha256, written after it
    kernels/<key[:2]>/<key>.lock             flock()ed while the entry is being built
    kernels/.tmp-*/                          private build directories

An entry is valid only when `meta.json` exists and matches the artifact's size and hash.
Because the artifact is renamed into place before `meta.json` is, a reader never trusts a
half-published entry, and a crash at any point leaves either nothing or an entry that the
next lookup sees as corrupt and rebuilds. No fsync is needed for the same reason: a file
truncated by a power loss fails the hash check.

Only the slow path (a miss or a corrupt entry) takes the lock; a hit costs a stat, a small
JSON read and one hash of the artifact per process.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["artifact_key", "cache_dir", "cache_disabled", "get_or_build"]

# Bumped whenever the layout or the meaning of a key changes, so that an old cache is
# ignored rather than misread.
_CACHE_FORMAT = 1

_META_NAME = "meta.json"
_TMP_PREFIX = ".tmp-"
# Build directories left behind by a killed process are removed once they are this old;
# no live build (the compiler times out after five minutes) runs anywhere near this long.
_STALE_TMP_AGE_S = 24 * 3600.0

_TRUE_WORDS = ("1", "true", "yes", "on")

# Paths verified by this process, with the (inode, size, mtime) they had then. A hit on
# a verified path costs one stat; a replaced or truncated file fails the comparison and is
# verified again.
_verified_lock = threading.Lock()
_verified: dict[str, tuple[int, int, int]] = {}

# Private build directories made while the cache is disabled; removed at exit.
_private_dirs: list[str] = []


def cache_dir() -> Path:
    """Return the cache root: `$TILEJIT_CACHE_DIR`, else `~/.cache/tilejit`.

    Kernel artifacts live under `cache_dir() / "kernels"`.

    Example:
        >>> os.environ["TILEJIT_CACHE_DIR"] = "/tmp/tj"; cache_dir()
        PosixPath('/tmp/tj')
    """
    configured = os.environ.get("TILEJIT_CACHE_DIR", "").strip()
    return Path(configured or "~/.cache/tilejit").expanduser()


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


def _sha256_file(path: str) -> str:
    # hashlib.file_digest() would do, but it only exists from Python 3.11 on.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fingerprint(info: os.stat_result) -> tuple[int, int, int]:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _valid_entry(artifact: str, meta_path: str, key: str) -> bool:
    """Return True when `artifact` exists and matches its meta.json (cheap when known)."""
    try:
        info = os.stat(artifact)
    except OSError:
        return False
    fingerprint = _fingerprint(info)
    with _verified_lock:
        if _verified.get(artifact) == fingerprint:
            return True
    try:
        with open(meta_path, "rb") as handle:
            meta = json.loads(handle.read())
        valid = (
            isinstance(meta, dict)
            and meta.get("format") == _CACHE_FORMAT
            and meta.get("key") == key
            and meta.get("size") == info.st_size
            and meta.get("sha256") == _sha256_file(artifact)
        )
    except (OSError, ValueError):
        valid = False
    if valid:
        with _verified_lock:
            _verified[artifact] = fingerprint
    return valid


def _forget(artifact: str) -> None:
    with _verified_lock:
        _verified.pop(artifact, None)


def _reset_memo() -> None:
    """Forget every verified path, as a new process would (for tests)."""
    with _verified_lock:
        _verified.clear()


def get_or_build(key: str, build: Callable[[Path], None], suffix: str = ".so") -> Path:
    """Return the path of a valid artifact for `key`, calling `build(path)` on a miss.

    `build` must write the artifact to the path it is given (a fresh file in a private
    directory). Whatever it produces is published atomically; concurrent callers with the
    same key, in any process, wait for one build instead of each running their own. If
    `build` raises, nothing is published and the exception propagates, so a failure is
    retried on the next call rather than cached. A corrupt entry (missing meta.json, size
    or hash mismatch) is deleted and rebuilt. With `TILEJIT_DISABLE_CACHE` set, every call
    builds into a new private temporary directory and nothing is shared.

    Example:
        >>> key = artifact_key(source=src, target="cpu", flags=[])
        >>> so = get_or_build(key, lambda out: compile_cpu(src, "vec_add", [], out))
        >>> so.name
        'kernel.so'
    """
    _check_key(key, suffix)
    if cache_disabled():
        return _build_private(build, suffix)

    kernels = cache_dir() / "kernels"
    shard = kernels / key[:2]
    entry = shard / key
    artifact = os.path.join(entry, "kernel" + suffix)
    meta_path = os.path.join(entry, _META_NAME)
    if _valid_entry(artifact, meta_path, key):
        return Path(artifact)

    import fcntl

    try:
        shard.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(shard / (key + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        # A read-only or full cache (a locked-down home directory, a CI sandbox) should
        # cost speed, not the ability to run kernels at all.
        import warnings

        warnings.warn(
            f"tilejit: cache directory {kernels} is unusable ({exc}); building without"
            " the cache (set TILEJIT_CACHE_DIR to a writable directory)",
            RuntimeWarning,
            stacklevel=2,
        )
        return _build_private(build, suffix)
    try:
        # flock() conflicts between separate open()s even inside one process, so this
        # serialises threads as well as processes. The lock file is never deleted:
        # unlinking it would let a second builder lock a fresh inode at the same name.
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # Another process may have published the entry while this one waited.
        if _valid_entry(artifact, meta_path, key):
            return Path(artifact)
        _forget(artifact)
        _remove_entry(entry)
        _remove_stale_tmp_dirs(kernels)
        _build_and_publish(kernels, entry, artifact, meta_path, key, build, suffix)
        return Path(artifact)
    finally:
        # Closing the descriptor releases the lock.
        os.close(lock_fd)


def _build_private(build: Callable[[Path], None], suffix: str) -> Path:
    import tempfile

    workdir = tempfile.mkdtemp(prefix="tilejit-")
    target = Path(workdir) / ("kernel" + suffix)
    try:
        build(target)
        if not target.is_file():
            raise RuntimeError(f"the build function did not write {target}")
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


def _build_and_publish(
    kernels: Path,
    entry: Path,
    artifact: str,
    meta_path: str,
    key: str,
    build: Callable[[Path], None],
    suffix: str,
) -> None:
    """Build into a temp dir on the cache's filesystem, then rename into `entry`."""
    import tempfile

    # Same filesystem as the entry, so os.replace() is an atomic rename, never a copy.
    workdir = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=kernels)
    try:
        built = os.path.join(workdir, "kernel" + suffix)
        build(Path(built))
        if not os.path.isfile(built):
            raise RuntimeError(f"the build function did not write {built}")
        info = os.stat(built)
        meta = {
            "format": _CACHE_FORMAT,
            "key": key,
            "size": info.st_size,
            "sha256": _sha256_file(built),
            "created": time.time(),
        }
        # mkdtemp() makes private 0700 directories; a cache entry is readable like any
        # other file its owner creates.
        entry.mkdir(mode=0o755, exist_ok=True)
        os.replace(built, artifact)
        # meta.json goes last: its presence is what marks the entry as complete.
        meta_tmp = os.path.join(workdir, _META_NAME)
        with open(meta_tmp, "w", encoding="utf-8") as handle:
            json.dump(meta, handle, sort_keys=True)
        os.replace(meta_tmp, meta_path)
    finally:
        _rmtree(workdir)


def _remove_entry(entry: Path) -> None:
    # Called under the entry's lock, so no other process is publishing into it; readers
    # that raced with the removal fail validation and come to the lock themselves.
    if entry.is_dir() and not entry.is_symlink():
        _rmtree(str(entry))
    elif os.path.lexists(entry):
        os.unlink(entry)


def _remove_stale_tmp_dirs(kernels: Path) -> None:
    now = time.time()
    try:
        names = os.listdir(kernels)
    except OSError:
        return
    for name in names:
        if not name.startswith(_TMP_PREFIX):
            continue
        path = os.path.join(kernels, name)
        try:
            if now - os.stat(path).st_mtime > _STALE_TMP_AGE_S:
                _rmtree(path)
        except OSError:
            pass


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
