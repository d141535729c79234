"""The one on-disk cache of built files: kernels, the wrapper, the core and the benchmark's
peer extensions all publish through `get_or_build`.

An entry is a directory holding one artifact and its `meta.json`::

    <parent>/<name>/<artifact>    the built file (a .so, a .cubin, ...)
    <parent>/<name>/meta.json     its size and sha256, written after it
    <parent>/<name>.lock          flock()ed while the entry is being built
    <tmp_dir>/.tmp-*/             private build directories

An entry is valid only when `meta.json` exists and matches the artifact's size and hash,
and the artifact passes the caller's `check` (for shared libraries: `elf.problem`, that no
header points past the end of the file, which a loader would turn into SIGBUS).
Because the artifact is renamed into place before `meta.json` is, a reader never trusts a
half-published entry, and a crash at any point leaves either nothing or an entry that the
next lookup sees as corrupt and rebuilds. No fsync is needed for the same reason: a file
truncated by a power loss fails the hash check.

Only the slow path (a miss or a corrupt entry) takes the lock, and it checks again once it
holds it, so many processes racing on an empty cache build once. A hit costs a stat, a
small JSON read and one hash of the artifact per process.

A cache root that cannot hold entries (`TILEJIT_CACHE_DIR` read-only, full, or a file)
costs speed, not the ability to run: `with_fallback` moves this process to a private root
with one warning naming the variable, and every artifact (kernels, the wrapper, the core)
is cached there instead.

This module imports nothing from `tilejit`: it serves `build_tools` (the wrapper and the
core), and `tilejit` uses it from above.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from . import env
from . import scratch as _scratch

__all__ = [
    "CacheUnusableError",
    "cache_root",
    "discard",
    "get_or_build",
    "hash_files",
    "reset_memo",
    "with_fallback",
]

# Bumped whenever the entry layout or meta.json changes, so an old entry is rebuilt rather
# than misread.
_FORMAT = 1
_META_NAME = "meta.json"
TMP_PREFIX = ".tmp-"
# Build directories left behind by a killed process are removed once they are this old;
# no live build (compilers time out after five minutes) runs anywhere near this long.
_STALE_TMP_AGE_S = 24 * 3600.0

# Artifacts verified by this process, with the (inode, size, mtime) they had then. A hit
# on a verified path costs one stat; a replaced or truncated file fails the comparison and
# is verified again.
_verified_lock = threading.Lock()
_verified: dict[str, tuple[tuple[int, int, int], str]] = {}  # -> (fingerprint, sha256)


class CacheUnusableError(OSError):
    """The cache directory cannot hold the entry (read-only, full, or not a directory)."""


# Configured roots this process found unusable -> the private root used instead.
_fallback_lock = threading.Lock()
_fallbacks: dict[Path, Path] = {}
_fallback_reasons: dict[Path, str] = {}  # private root -> why the configured one failed


def configured_root() -> Path:
    """Return the configured cache root: `$TILEJIT_CACHE_DIR`, else `~/.cache/tilejit`."""
    return Path(env.text("TILEJIT_CACHE_DIR") or "~/.cache/tilejit").expanduser()


def cache_root() -> Path:
    """Return the cache root: `$TILEJIT_CACHE_DIR`, else `~/.cache/tilejit`; or the private
    directory this process uses instead when that one proved unusable (`with_fallback`).

    Example:
        >>> os.environ["TILEJIT_CACHE_DIR"] = "/tmp/tj"; cache_root()
        PosixPath('/tmp/tj')
    """
    configured = configured_root()
    if configured not in _trust_checked:
        _check_trust(configured)
    return _fallbacks.get(configured, configured)


# Roots whose ownership and permissions this process has checked (once per root).
_trust_checked: set[Path] = set()


def _check_trust(root: Path) -> None:
    """Warns once (a `RuntimeWarning` on stderr) when others can write to the cache: the
    root, or one of tilejit's areas in it, owned by another user, or writable by every
    user without the sticky bit (an area, even with it). Another user could then put a
    library there that this process loads. The cache is still used: the warning says
    which directory and why, so the user can fix it or set TILEJIT_CACHE_DIR."""
    import stat
    import warnings

    with _fallback_lock:
        if root in _trust_checked:
            return
        _trust_checked.add(root)
    uid = os.geteuid()
    problems = []
    for path in (root, *(root / area for area in _AREAS)):
        try:
            info = os.stat(path)
        except OSError:
            continue  # made by this process when needed, with its own owner and umask
        if info.st_uid != uid:
            problems.append(f"{path} is owned by uid {info.st_uid}, not by this user "
                            f"(uid {uid})")
        elif info.st_mode & stat.S_IWOTH and not (path == root and info.st_mode & stat.S_ISVTX):
            problems.append(f"{path} is writable by every user (mode "
                            f"{stat.filemode(info.st_mode)})")
    if problems:
        warnings.warn(f"tilejit: the cache directory {root} can be written by other users: "
                      + "; ".join(problems) + ". Another user could place a library there "
                      "that tilejit loads; make it yours and not writable by others (chmod "
                      "o-w), or set TILEJIT_CACHE_DIR to a private directory",
                      RuntimeWarning, stacklevel=3)


def with_fallback(make: Callable[[], Path]) -> Path:
    """Return `make()`, which builds or finds an artifact under `cache_root()`; when the
    cache is unusable (`CacheUnusableError`), move this process to a private cache root
    and return `make()` again, there.

    The move happens once per configured root, with one `RuntimeWarning` naming
    `TILEJIT_CACHE_DIR`; every artifact made afterwards (kernels, the wrapper, the core)
    lives in the private root, which is removed at exit. An unusable private root is an
    error.

    Example:
        >>> path = with_fallback(lambda: get_or_build(cache_root() / "core" / key, name, build))
    """
    try:
        return make()
    except CacheUnusableError as exc:
        if not _fall_back(exc):
            raise
    return make()


def private_root() -> tuple[Path, str] | None:
    """The private directory this process caches in instead of the configured root, and
    why the configured root is unusable; None when the configured root is in use."""
    with _fallback_lock:
        private = _fallbacks.get(configured_root())
        return None if private is None else (private, _fallback_reasons.get(private, ""))


def _fall_back(reason: OSError) -> bool:
    """Switch to a private root for the configured one; False if this process already
    uses a private root (which then is what failed)."""
    import warnings

    configured = configured_root()
    with _fallback_lock:
        if configured in _fallbacks:
            return False
        private = Path(_scratch.make("cache"))
        _fallbacks[configured] = private
        _fallback_reasons[private] = str(reason.strerror or reason)
        if len(_fallbacks) == 1:
            import atexit

            atexit.register(_remove_fallbacks)
    variable = ("TILEJIT_CACHE_DIR=" if env.text("TILEJIT_CACHE_DIR")
                else "the default cache directory ")
    warnings.warn(f"tilejit: {variable}{configured} is unusable ({reason.strerror or reason}); "
                  f"this process caches kernels, the wrapper and the core in {private} "
                  f"instead (set TILEJIT_CACHE_DIR to a writable directory)",
                  RuntimeWarning, stacklevel=3)
    return True


def _remove_fallbacks() -> None:
    # A library that is still loaded stays mapped after its file is unlinked.
    with _fallback_lock:
        for private in _fallbacks.values():
            _rmtree(str(private))
        _fallbacks.clear()


def hash_files(kind: str, extra: Iterable[str], files: Iterable[tuple[str, Path]]) -> str:
    """Return 16 hex digits of a sha256 over `kind`, the `extra` strings and each named file.

    Names, not paths, enter the hash, so two copies of the same sources hash alike.

    Example:
        >>> hash_files("tilejit-core", ["cc"], [("core/src/a.c", Path("core/src/a.c"))])
        '0b61d2e7a9f4c318'
    """
    files = list(files)
    # The same files unchanged (same inode, size and mtime) hash as before: a process asks
    # for the core's and the wrapper's keys several times as it starts.
    seen = (kind, tuple(extra), tuple((name, str(path), _fingerprint(os.stat(path)))
                                      for name, path in files))
    known = _hashed.get(seen)
    if known is not None:
        return known
    digest = hashlib.sha256()

    def feed(data: bytes) -> None:
        # Length prefixes keep ("ab", "c") and ("a", "bc") from hashing alike.
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    feed(kind.encode())
    for value in seen[1]:
        feed(value.encode())
    for name, path in files:
        feed(name.encode())
        feed(path.read_bytes())
    _hashed[seen] = found = digest.hexdigest()[:16]
    return found


_hashed: dict[tuple, str] = {}  # hash_files' answers by the files' names and fingerprints


def sha256_file(path) -> str:
    """The SHA-256 of the file at `path`, as 64 hex digits (cache entries, exports)."""
    # hashlib.file_digest() would do, but it only exists from Python 3.11 on.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fingerprint(info: os.stat_result) -> tuple[int, int, int]:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


Check = Callable[[str], "str | None"]  # the artifact's path -> why it is unusable, or None


def _valid(artifact: str, meta_path: str, name: str, check: Check | None,
           record_use: bool = False) -> bool:
    """Return True when `artifact` exists, matches its meta.json and passes `check` (cheap
    when known). `record_use`: the first time this process finds it valid, that is the
    entry's last use (meta.json's mtime)."""
    try:
        info = os.stat(artifact)
    except OSError:
        return False
    fingerprint = _fingerprint(info)
    with _verified_lock:
        known = _verified.get(artifact)
        if known is not None and known[0] == fingerprint:
            return True
    try:
        with open(meta_path, "rb") as handle:
            meta = json.loads(handle.read())
        valid = (
            isinstance(meta, dict)
            and meta.get("format") == _FORMAT
            and meta.get("key") == name
            and meta.get("size") == info.st_size
            and meta.get("sha256") == sha256_file(artifact)
            and (check is None or check(artifact) is None)
        )
    except (OSError, ValueError):
        valid = False
    if valid:
        with _verified_lock:
            _verified[artifact] = (fingerprint, meta["sha256"])
        note_used(os.path.dirname(artifact))
        if record_use:
            _record_use(meta_path)
    return valid


def valid(artifact, check: Check | None = None, record_use: bool = False) -> bool:
    """Whether the artifact of an entry (`<entry>/<name>`) matches its meta.json and
    passes `check` (see `_valid`); for readers of entries that do not build them (the
    prebuilt core and wrapper, kernels found without their compiler)."""
    artifact = Path(artifact)
    return _valid(str(artifact), str(artifact.parent / _META_NAME), artifact.parent.name, check,
                  record_use)


def _record_use(meta_path: str) -> None:
    """Marks an entry used now: its meta.json's mtime (content unchanged). A read-only
    cache records nothing."""
    with contextlib.suppress(OSError):
        os.utime(meta_path)


def known_sha256(artifact) -> str | None:
    """The SHA-256 this process verified `artifact` to have, even if it has been removed
    from the cache since (what a loaded kernel was loaded from); None if never verified."""
    with _verified_lock:
        known = _verified.get(str(artifact))
    return None if known is None else known[1]


# Entries this process has built or found valid. The size bound never removes its core
# and wrapper among them, so that TILEJIT_CACHE_MAX_SIZE below what one process needs (0
# included) does not remove the core a moment after building it; every other entry,
# kernels this process uses included, counts against the bound (enforce_max_size).
_used_lock = threading.Lock()
_used: set[Path] = set()


def note_used(entry) -> None:
    """Marks `entry` as used by this process: the size bound keeps it."""
    with _used_lock:
        _used.add(Path(entry))


def _forget(artifact: str) -> None:
    with _verified_lock:
        _verified.pop(artifact, None)


def reset_memo() -> None:
    """Forget every verified artifact, as a new process would (for tests)."""
    with _verified_lock:
        _verified.clear()
    with _used_lock:
        _used.clear()


@contextlib.contextmanager
def _entry_lock(entry: Path) -> Iterator[None]:
    """Hold flock() on `<parent>/<name>.lock`: it excludes other processes and other
    threads alike (each open() is its own lock holder). Lock files are never deleted:
    removing one while another process waits on it would split the lock in two."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(entry.parent / f"{entry.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        raise CacheUnusableError(exc.errno, f"cannot lock {entry}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        # Closing the descriptor releases the lock.
        os.close(fd)


def get_or_build(
    entry: Path,
    artifact_name: str,
    build: Callable[[Path], None],
    *,
    tmp_dir: Path | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
    check: Check | None = None,
    info: dict | None = None,
) -> Path:
    """Return `entry / artifact_name`, a valid artifact, calling `build(path)` on a miss.

    `build` must write the artifact to the path it is given (a fresh file in a private
    directory under `tmp_dir`, default `entry.parent`, on the cache's filesystem); a dict
    it returns is added to the entry's meta.json. What it writes is published atomically; concurrent callers in any thread or process wait for
    one build. If `build` raises, nothing is published and the exception propagates, so a
    failure is retried next time rather than cached. A corrupt entry (missing meta.json,
    size or hash mismatch, or refused by `check`, which returns why an artifact is unusable
    or None: `elf.problem` for shared libraries) is deleted and rebuilt; a build that
    `check` refuses raises RuntimeError and publishes nothing. `force=True` rebuilds a
    valid entry too. `log` receives one line per build. Raises `CacheUnusableError` when
    the directory cannot hold the entry (see `with_fallback`). `info` (what the entry is:
    `kind`, `name`, `target`, `arch`) is kept in meta.json for `python -m tilejit cache
    ls`. A process's first use of an entry is recorded as its last use (meta.json's
    mtime); after a write, the cache is pruned to `$TILEJIT_CACHE_MAX_SIZE` if set.

    Example:
        >>> so = get_or_build(cache_root() / "core" / key, "libtilejit_core.so", compile_core)
    """
    entry = Path(entry)
    max_size()  # a bad TILEJIT_CACHE_MAX_SIZE is refused before anything is written
    artifact = os.path.join(entry, artifact_name)
    meta_path = os.path.join(entry, _META_NAME)
    if not force and _valid(artifact, meta_path, entry.name, check, record_use=True):
        return Path(artifact)
    with _entry_lock(entry):
        # Another process may have published the entry while this one waited.
        if not force and _valid(artifact, meta_path, entry.name, check):
            if log is not None:
                log(f"using {artifact}, built by another process")
            return Path(artifact)
        if log is not None:
            damaged = os.path.exists(artifact) and not force
            log(f"{artifact} is damaged; rebuilding it" if damaged else f"building {artifact}")
        _forget(artifact)
        _remove_entry(entry)
        scratch = Path(tmp_dir) if tmp_dir is not None else entry.parent
        _remove_stale_tmp_dirs(scratch)
        _build_and_publish(scratch, entry, artifact_name, build, check, info)
    note_used(str(entry))
    enforce_max_size(keep=entry)
    return Path(artifact)


def discard(artifact: Path, seen: os.stat_result | None, log: Callable[[str], None] | None = None
            ) -> None:
    """Delete the entry of `artifact` if it is still the file `seen` (its stat before use).

    For a valid-looking artifact its user cannot use (a library the loader rejects): only
    the very file that failed is removed, so a fresh build another process already
    published is kept.
    """
    entry = Path(artifact).parent
    with _entry_lock(entry):
        try:
            current = os.stat(artifact)
        except FileNotFoundError:
            return
        if seen is None or _fingerprint(current) == _fingerprint(seen):
            if log is not None:
                log(f"removing unusable {artifact}")
            _forget(str(artifact))
            _remove_entry(entry)


def _build_and_publish(scratch: Path, entry: Path, artifact_name: str,
                       build: Callable[[Path], None], check: Check | None,
                       info: dict | None = None) -> None:
    """Build into a temp dir on the cache's filesystem, then rename into `entry`."""
    import tempfile

    def make_workdir() -> str:
        # Same filesystem as the entry, so os.replace() is an atomic rename, never a copy.
        scratch.mkdir(parents=True, exist_ok=True)
        return tempfile.mkdtemp(prefix=TMP_PREFIX, dir=scratch)

    workdir = _unusable_on_error(entry, make_workdir)
    try:
        built = os.path.join(workdir, artifact_name)
        # A build may say more about what it wrote (a remote cache: where it came from).
        said = build(Path(built))
        if not os.path.isfile(built):
            raise RuntimeError(f"the build function did not write {built}")
        problem = check(built) if check is not None else None
        if problem is not None:
            raise RuntimeError(f"the build wrote an unusable {artifact_name}: {problem}")
        size = os.stat(built).st_size
        meta = {
            "format": _FORMAT,
            "key": entry.name,
            "size": size,
            "sha256": sha256_file(built),
            "created": time.time(),
            "artifact": artifact_name,
            **(info or {}),
            **(said if isinstance(said, dict) else {}),
        }
        _unusable_on_error(entry, lambda: _publish(workdir, built, entry, artifact_name, meta))
    finally:
        _rmtree(workdir)


def _publish(workdir: str, built: str, entry: Path, artifact_name: str, meta: dict) -> None:
    # mkdtemp() makes private 0700 directories; a cache entry is readable like any other
    # file its owner creates.
    entry.mkdir(mode=0o755, exist_ok=True)
    os.replace(built, os.path.join(entry, artifact_name))
    # meta.json goes last: its presence is what marks the entry as complete.
    meta_tmp = os.path.join(workdir, _META_NAME)
    with open(meta_tmp, "w", encoding="utf-8") as handle:
        json.dump(meta, handle, sort_keys=True)
    os.replace(meta_tmp, os.path.join(entry, _META_NAME))


def _unusable_on_error(entry: Path, step: Callable[[], object]) -> object:
    """`step()`, a file operation on the cache itself: its OSError (no space, read-only)
    means the cache cannot hold `entry`."""
    try:
        return step()
    except OSError as exc:
        raise CacheUnusableError(exc.errno, f"cannot write {entry}: {exc.strerror}") from exc


def _remove_entry(entry: Path) -> None:
    # Called under the entry's lock, so no other process is publishing into it; readers
    # that raced with the removal fail validation and come to the lock themselves.
    if entry.is_dir() and not entry.is_symlink():
        _rmtree(str(entry))
    elif os.path.lexists(entry):
        os.unlink(entry)


def _remove_stale_tmp_dirs(scratch: Path) -> None:
    now = time.time()
    try:
        names = os.listdir(scratch)
    except OSError:
        return
    for name in names:
        if not name.startswith(TMP_PREFIX):
            continue
        path = os.path.join(scratch, name)
        try:
            if now - os.stat(path).st_mtime > _STALE_TMP_AGE_S:
                _rmtree(path)
        except OSError:
            pass


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# ---- Managing the cache: entries, checks, removal, the size bound --------------------------


# The directories under a cache root that tilejit writes entries into, and how deep an
# entry lies below each: kernels/<key[:2]>/<key>, core/<hash> (and core/<hash>-torch_op),
# wrapper/<abi>/<hash>, bench/<stem>-<hash>, tunings/<key[:2]>/<key> (an autotuner's
# choice). Nothing else under the root is tilejit's: a cache directory set to a shared
# directory by mistake keeps its other files.
_AREAS = {"kernels": 2, "core": 1, "wrapper": 2, "bench": 1, "tunings": 2, "probes": 1}
_EMBEDDING_LINK = "libtilejit.so"  # what ``-ltilejit`` finds beside a core (its entry's)
_KERNEL_SUFFIXES = (".so", ".cubin", ".ptx", ".fatbin")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
# meta.json's fields and the types they must have; a meta.json that breaks these (a hand
# edit, another program's file) marks a damaged entry.
_META_TYPES = {"format": int, "key": str, "size": int, "sha256": str, "artifact": str,
               "created": (int, float), "kind": str, "name": str, "target": str, "arch": str,
               "portable_key": str}


def _plain_name(name: object) -> bool:
    return (isinstance(name, str) and name not in ("", ".", "..") and set(name) <= _NAME_CHARS)


def _artifact_shape(parts: tuple[str, ...], name: str) -> bool:
    """Whether `name` is the file name tilejit gives the artifact of an entry at `parts`
    (its path below the root)."""
    area, key = parts[0], parts[-1]
    if area == "kernels":
        return name.startswith("kernel.") and name[len("kernel"):] in _KERNEL_SUFFIXES
    if area == "tunings":
        return name == "tuning.json"
    if area == "probes":  # what a fast path found on a build of another project
        return name == "probe.json"
    if area == "core":  # the core, or the torch_op.so an export carries (core/<hash>-torch_op)
        return name == f"libtilejit_core-{key}.so" or (key.endswith("-torch_op")
                                                       and name == "torch_op.so")
    if area == "wrapper":
        return name.startswith("_tilejit") and name.endswith(".so")
    return name.startswith(key.rsplit("-", 1)[0]) and name.endswith(".so")  # bench


def _owned(parts: tuple[str, ...], dirnames: list[str], filenames: list[str]) -> bool:
    """Whether the directory at `parts` below the root is provably a tilejit entry: at an
    entry's place in one of tilejit's areas, with a key-shaped name, no subdirectory, and
    no file but meta.json and one artifact named as tilejit names it."""
    if not parts or parts[0] not in _AREAS or len(parts) != 1 + _AREAS[parts[0]]:
        return False
    if not all(_plain_name(p) for p in parts) or dirnames:
        return False
    keyed = parts[0] in ("kernels", "tunings")  # <area>/<key[:2]>/<key>
    if keyed and (len(parts[1]) != 2 or not parts[2].startswith(parts[1])):
        return False
    artifacts = [name for name in filenames if name != _META_NAME]
    if parts[0] == "core" and _EMBEDDING_LINK in artifacts and len(artifacts) == 2:
        # The core's link for C programs (``python -m tilejit config``), beside it.
        artifacts.remove(_EMBEDDING_LINK)
    return len(artifacts) <= 1 and all(_artifact_shape(parts, name) for name in artifacts) \
        and bool(filenames)


class Entry:
    """One cache entry: its directory, what its meta.json says, its size on disk (bytes),
    when it was created and when a process last used it (Unix seconds). `damage` is why
    its meta.json cannot be trusted (missing, not JSON, fields of the wrong type), or
    None; `meta` then holds only the fields of the right type."""

    __slots__ = ("created", "damage", "last_used", "meta", "path", "size")

    def __init__(self, path: Path, meta: dict, size: int, created: float, last_used: float,
                 damage: str | None = None):
        self.path, self.meta, self.size = path, meta, size
        self.created, self.last_used, self.damage = created, last_used, damage

    @property
    def artifact(self) -> str | None:
        """The artifact's file name: meta.json's, else the one regular file beside it."""
        name = self.meta.get("artifact")
        if _plain_name(name):
            return name
        files = [p.name for p in self.path.iterdir()
                 if p.name != _META_NAME and p.is_file() and not p.is_symlink()]
        return files[0] if len(files) == 1 else None


def _read_meta(meta_path: Path) -> tuple[dict, str | None]:
    """meta.json's fields of the right type, and why the file cannot be trusted (or None)."""
    try:
        loaded = json.loads(meta_path.read_bytes())
    except FileNotFoundError:
        return {}, "meta.json is missing"
    except (OSError, ValueError) as exc:
        return {}, f"meta.json is unreadable ({exc})"
    if not isinstance(loaded, dict):
        return {}, f"meta.json holds a {type(loaded).__name__}, not an object"
    meta, wrong = {}, []
    for field, value in loaded.items():
        wanted = _META_TYPES.get(field)
        if wanted is not None and (not isinstance(value, wanted) or isinstance(value, bool)):
            wrong.append(f"{field} = {json.dumps(value)[:40]}")
        else:
            meta[field] = value
    if wrong:
        return meta, "meta.json has fields of the wrong type: " + ", ".join(wrong)
    return meta, None


def walk(root: Path) -> tuple[list[Entry], int]:
    """Every tilejit entry under `root` (see `_owned`), and how many files under `root`
    are not tilejit's (neither in an entry, nor a lock file, nor a build directory in
    progress in one of tilejit's areas): those are never listed, changed or removed. An
    entry whose meta.json is missing, unreadable or of the wrong shape is listed with its
    `damage` said (`verify` reports it)."""
    root = Path(root)
    found, foreign = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        parts = Path(dirpath).relative_to(root).parts
        in_area = bool(parts) and parts[0] in _AREAS and len(parts) <= _AREAS[parts[0]]
        if in_area or not parts:
            # Build directories in progress are skipped; lock files live beside entries.
            dirnames[:] = [d for d in dirnames if not d.startswith(TMP_PREFIX)]
            foreign += sum(not (name.endswith(".lock") and (parts or name == "prune.lock"))
                           for name in filenames)
            continue
        if not _owned(parts, dirnames, filenames):
            foreign += len(filenames)
            continue
        entry = Path(dirpath)
        size = 0
        for name in filenames:
            with contextlib.suppress(OSError):
                size += os.lstat(entry / name).st_size
        meta, damage = _read_meta(entry / _META_NAME)
        try:
            last_used = os.stat(entry / _META_NAME).st_mtime
        except OSError:
            last_used = 0.0
            with contextlib.suppress(OSError):
                last_used = os.stat(entry).st_mtime
        # The file system stamps times from a coarser clock than time.time(), so a record
        # read right after it was written can look used a few milliseconds before it was
        # created; it was created no later than its first use.
        created = float(meta.get("created", last_used))
        if last_used:
            created = min(created, float(last_used))
        found.append(Entry(entry, meta, size, created, float(last_used), damage))
    return found, foreign


def entries(root: Path) -> list[Entry]:
    """Every tilejit entry under `root` (`walk`)."""
    return walk(root)[0]


def verify(entry: Entry, check: Check | None = None) -> str | None:
    """Why `entry` is damaged, or None: its meta.json, its artifact's size and SHA-256,
    and `check` (for a shared library: `elf.problem`)."""
    if entry.damage is not None:
        return entry.damage
    if entry.meta.get("format") != _FORMAT or entry.meta.get("key") != entry.path.name:
        return "meta.json is of another format or another entry"
    name = entry.artifact
    if name is None:
        return "no artifact"
    artifact = entry.path / name
    try:
        size = os.stat(artifact).st_size
    except OSError as exc:
        return f"{name}: {exc.strerror}"
    if size != entry.meta.get("size"):
        return f"{name}: {size} bytes, meta.json says {entry.meta.get('size')}"
    if sha256_file(artifact) != entry.meta.get("sha256"):
        return f"{name}: its SHA-256 is not meta.json's"
    problem = check(str(artifact)) if check is not None else None
    return None if problem is None else f"{name}: {problem}"


def remove(entry: Path) -> None:
    """Removes an entry under its lock: no process is publishing into it meanwhile, a
    process that loaded its artifact keeps it (unlinked files stay mapped), and one that
    looks for it next finds nothing valid and builds it again."""
    with _entry_lock(entry):
        _remove_entry(entry)


def prune(root: Path, max_size: int | None = None, older_than: float | None = None,
          keep: Path | set[Path] | None = None) -> list[Entry]:
    """Removes entries not used for `older_than` seconds, then least recently used ones
    until the total is at most `max_size` bytes: kernels first, tilejit's own core and
    wrappers (which every process needs, and which take seconds to build) only when
    removing every kernel is not enough. Never `keep` (an entry or a set of them). Returns
    what it removed. One process prunes a root at a time (`<root>/prune.lock`)."""
    removed = []
    keep = {Path(keep)} if isinstance(keep, (str, Path)) else set(keep or ())
    with _prune_lock(root):
        now = time.time()
        listed = sorted(entries(root), key=lambda e: (
            e.path.relative_to(root).parts[0] in ("core", "wrapper"), e.last_used))
        total = sum(e.size for e in listed)
        for e in listed:
            if e.path in keep:
                continue
            stale = older_than is not None and now - e.last_used > older_than
            over = max_size is not None and total > max_size
            if not (stale or over):
                continue
            remove(e.path)
            total -= e.size
            removed.append(e)
    return removed


@contextlib.contextmanager
def _prune_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "prune.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes in `500M`, `2G`, `1.5g`, `100k`, `64KiB`, `4096` (units of 1024)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if match is None:
        raise ValueError(f"size {text!r}: expected a number with an optional unit K, M, G "
                         "or T (powers of 1024), like 500M or 2G")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_duration(text: str) -> float:
    """Seconds in `30m`, `12h`, `7d`, `2w`, `45s`, `90` (seconds)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(text), re.IGNORECASE)
    if match is None:
        raise ValueError(f"duration {text!r}: expected a number with an optional unit s, m, h, "
                         "d or w, like 30m, 12h or 7d")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    return float(match.group(1)) * scale[match.group(2).lower()]


def max_size() -> int | None:
    """`$TILEJIT_CACHE_MAX_SIZE` in bytes, or None when unset; `env.BadValue` for a value
    that is not a size (`abc`, `-1`)."""
    return env.size("TILEJIT_CACHE_MAX_SIZE", parse_size)


def enforce_max_size(keep: Path | None = None) -> None:
    """After a write: prunes the cache root to `$TILEJIT_CACHE_MAX_SIZE`, least recently
    used first, keeping `keep` (the entry just written)."""
    limit = max_size()
    if limit is None:
        return
    root = cache_root()
    if keep is not None and not Path(keep).is_relative_to(root):
        return  # a private build, outside the shared cache
    with _used_lock:
        # Only this process's core and wrapper are exempt (rebuilding them would loop);
        # a kernel it loaded keeps running without its file, and keeps its bytes for
        # export (tilejit.runtime.kernel).
        kept = {p for p in _used if _kind_of(root, p) in ("core", "wrapper")}
    if keep is not None:
        kept.add(Path(keep))
    with contextlib.suppress(OSError):
        prune(root, max_size=limit, keep=kept)


def _kind_of(root: Path, entry: Path) -> str | None:
    """The top folder of `entry` under `root` (kernels, core, wrapper, ...), or None."""
    try:
        return Path(entry).relative_to(root).parts[0]
    except (ValueError, IndexError):
        return None
