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

import contextlib
import contextvars
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..native._build import build_tools, disk_cache, elf, env, scratch
from . import remote_cache as _remote

__all__ = ["artifact_key", "cache_dir", "cache_disabled", "get_or_build"]

# Bumped whenever the layout or the meaning of a key changes, so that an old cache is
# ignored rather than misread.
_CACHE_FORMAT = 1

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
    """Return True when `TILEJIT_DISABLE_CACHE` is 1/true/yes/on (any case); False for
    0/false/no/off or unset; `env.BadValue` for anything else.

    Example:
        >>> os.environ["TILEJIT_DISABLE_CACHE"] = "Yes"; cache_disabled()
        True
    """
    return env.flag("TILEJIT_DISABLE_CACHE")


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
                 check: Callable[[str], str | None] | None = None,
                 info: dict | None = None, shared: bool = False,
                 verbose: bool = False, area: str = "kernels") -> Path:
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

    ``shared``: a kernel any machine with the same key may run. With `TILEJIT_REMOTE_CACHE`
    set, a local miss is looked up on the remote before `build` runs, and what `build`
    writes is published there (`tilejit.builder.remote_cache`); ``verbose`` logs those
    lookups on stderr.

    ``area`` is the cache's folder for the entry: ``kernels`` (the artifact is
    ``kernel<suffix>``) or ``tunings`` (an autotuner's choice, ``tuning<suffix>``).

    An artifact handed over by an executor's worker for this key
    (``tilejit.runtime.executors``, through ``supplied_artifacts``) is installed in place
    of ``build``, checked like a remote entry.

    Example:
        >>> key = artifact_key(source=src, target="cpu", flags=[])
        >>> so = get_or_build(key, lambda out: compile_cpu(src, "vec_add", [], out))
        >>> so.name
        'kernel.so'
    """
    _check_key(key, suffix)
    if area not in _ARTIFACT_NAMES:
        raise ValueError(f"cache area must be one of {sorted(_ARTIFACT_NAMES)}, got {area!r}")
    name = _ARTIFACT_NAMES[area] + suffix
    info = {"kind": _KINDS[area], **(info or {})}
    _capture_built(key, name, info)
    build = _supplied_or(key, name, check, build)
    if cache_disabled():
        path = _build_private(build, suffix, check, _ARTIFACT_NAMES[area])
        _captured_path(key, path)
        return path
    remote = _remote.configured() if shared else None
    if remote is not None:
        build = remote.around(key, build, name, check, info, verbose)

    def find_or_build() -> Path:
        folder = cache_dir() / area
        if disk_cache.max_size() is not None:
            _note_core_and_wrapper()
        found = disk_cache.get_or_build(folder / key[:2] / key, name, build,
                                        tmp_dir=folder, check=check, info=info)
        _captured_path(key, found)
        return found

    return disk_cache.with_fallback(find_or_build)


_ARTIFACT_NAMES = {"kernels": "kernel", "tunings": "tuning"}


# ---- Artifacts carried between processes (an executor's workers) -------------------------
#
# A worker compiling for another process records what `get_or_build` found or built for
# each key (`capture_artifacts`); the other process hands those bytes back to its own
# `get_or_build` (`supplied_artifacts`), which installs them, checked, in place of building.
# Both are per thread of control (context variables): a worker thread captures only its own
# compiles, and a supplied artifact serves only the compile that asked for it.

_capture: contextvars.ContextVar = contextvars.ContextVar("tilejit_capture", default=None)
_supply: contextvars.ContextVar = contextvars.ContextVar("tilejit_supply", default=None)


class Artifact(NamedTuple):
    """A cache entry's artifact as it travels between processes: its key, its file name in
    the entry (``kernel.so``), its bytes, their SHA-256, and what meta.json says of it."""

    key: str
    name: str
    data: bytes
    sha256: str
    info: dict


@contextlib.contextmanager
def capture_artifacts():
    """Records the artifact of every `get_or_build` in this context: yields the list the
    ``Artifact`` records are appended to, in order."""
    found: list = []
    token = _capture.set({"pending": {}, "found": found})
    try:
        yield found
    finally:
        _capture.reset(token)


def _capture_built(key: str, name: str, info: dict) -> None:
    state = _capture.get()
    if state is not None:
        state["pending"][key] = (name, info)


def _captured_path(key: str, path: Path) -> None:
    state = _capture.get()
    if state is None or key not in state["pending"]:
        return
    name, info = state["pending"].pop(key)
    data = Path(path).read_bytes()
    state["found"].append(Artifact(key, name, data, hashlib.sha256(data).hexdigest(),
                                   dict(info)))


@contextlib.contextmanager
def supplied_artifacts(artifacts):
    """`get_or_build` installs these (``Artifact`` records, by key) instead of building
    when the local cache misses their key. A record whose bytes do not match its SHA-256,
    or that the entry's check refuses, is not installed: the build runs instead. Yields a
    dict counting what happened: ``installed`` (keys installed from the records) and
    ``built`` (keys built here after all: no record for the key, or a refused one)."""
    state = {"by_key": {a.key: a for a in artifacts}, "installed": [], "built": []}
    token = _supply.set(state)
    try:
        yield state
    finally:
        _supply.reset(token)


def _supplied_or(key: str, name: str, check, build):
    """``build``, or, under `supplied_artifacts`, a build that writes the artifact supplied
    for ``key`` (falling back to ``build`` when there is none or it is not sound)."""
    state = _supply.get()
    if state is None:
        return build
    supplied = state["by_key"].get(key)

    def install(out: Path):
        if (supplied is not None and supplied.name == name
                and hashlib.sha256(supplied.data).hexdigest() == supplied.sha256):
            out.write_bytes(supplied.data)
            if check is None or check(str(out)) is None:
                state["installed"].append(key)
                return None
            out.unlink()
        state["built"].append(key)
        return build(out)

    return install


def _note_core_and_wrapper() -> None:
    """The core and the wrapper this process runs kernels with are in use, even before it
    loads them: the size bound keeps them (`TILEJIT_CACHE_MAX_SIZE=0` would otherwise
    remove them after the first kernel is written, for the process to build them again)."""
    import contextlib

    for where in (build_tools.core_library_path, build_tools.wrapper_path):
        # Nothing to note without sources to hash (an installed package's prebuilt ones).
        with contextlib.suppress(Exception):
            disk_cache.note_used(where().parent)


def find_portable(portable: str) -> Path | None:
    """A valid kernel artifact whose entry records ``portable`` (the key of what it was
    built from, leaving out the compiler: see ``compilation.compile``), the most recently
    used one if several; None if there is none. For a machine without the compiler that
    made the cache: its kernels still run."""
    root = cache_dir()
    found = []
    for entry in disk_cache.entries(root) if (root / "kernels").is_dir() else []:
        if entry.meta.get("portable_key") != portable or entry.artifact is None:
            continue
        artifact = entry.path / entry.artifact
        check = elf.problem if artifact.suffix == ".so" else None
        if disk_cache.valid(artifact, check, record_use=True):
            found.append((entry.last_used, artifact))
    return max(found)[1] if found else None


def store_bytes(data: bytes, suffix: str = ".so", info: dict | None = None,
                **parts: object) -> Path:
    """`data` as an artifact keyed by its content hash (and `parts`): a copy that no later
    change to the file it came from can alter (prebuilt kernels). A shared library
    (`suffix` ".so") must be whole (`elf.problem`), in the cache as when stored."""
    import hashlib

    key = artifact_key(prebuilt=hashlib.sha256(data).hexdigest(), **parts)
    return get_or_build(key, lambda out: out.write_bytes(data), suffix,
                        check=elf.problem if suffix == ".so" else None, info=info)


def _build_private(build: Callable[[Path], None], suffix: str,
                   check: Callable[[str], str | None] | None, stem: str = "kernel") -> Path:
    workdir = scratch.make("private")
    target = Path(workdir) / (stem + suffix)
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


# ---- Managing the cache: python -m tilejit cache ... ----------------------------------------

_KINDS = {"kernels": "kernel", "core": "core", "wrapper": "wrapper", "tunings": "tuning",
          "probes": "probe"}


def _record(entry: disk_cache.Entry, root: Path) -> dict:
    """What ``cache ls --json`` says of an entry."""
    meta = entry.meta
    top = entry.path.relative_to(root).parts[0]
    return {"key": entry.path.name, "kind": _KINDS.get(top, top),
            "name": meta.get("name", "-"), "target": meta.get("target", "-"),
            "arch": meta.get("arch", "-"), "size": entry.size,
            "created": round(entry.created, 3), "last_used": round(entry.last_used, 3),
            "path": str(entry.path), "damaged": entry.damage,
            "origin": meta.get("remote") if meta.get("origin") == "remote" else "local"}


def entries() -> list[dict]:
    """Every entry of the cache (kernels, the core, wrappers), least recently used first:
    ``key``, ``kind``, ``name``, ``target``, ``arch``, ``size`` (bytes), ``created`` and
    ``last_used`` (Unix seconds: the last time a process loaded it), ``path``, and
    ``damaged``: why its meta.json cannot be trusted, or None; ``origin``: "local" for what
    this machine built, else the address of the remote cache it came from."""
    root = cache_dir()
    found = sorted(disk_cache.entries(root), key=lambda e: e.last_used) if root.is_dir() else []
    return [_record(e, root) for e in found]


def verify(fix: bool = False) -> list[tuple[dict, str]]:
    """``(entry, why)`` for every damaged entry (its files against meta.json's size and
    SHA-256; a shared library must be whole); ``fix`` removes them."""
    root = cache_dir()
    damaged = []
    for entry in disk_cache.entries(root) if root.is_dir() else []:
        name = entry.artifact or ""
        problem = disk_cache.verify(entry, elf.problem if name.endswith(".so") else None)
        if problem is not None:
            damaged.append((_record(entry, root), problem))
            if fix:
                disk_cache.remove(entry.path)
    return damaged


def prune(max_size: int | None = None, older_than: float | None = None) -> list[dict]:
    """Removes entries not used for ``older_than`` seconds, then the least recently used
    until the cache holds at most ``max_size`` bytes; returns what was removed. Safe while
    other processes use the cache (see ``tilejit.native._build.disk_cache.remove``)."""
    root = cache_dir()
    if not root.is_dir():
        return []
    return [_record(e, root) for e in disk_cache.prune(root, max_size, older_than)]


def clear(kind: str | None = None) -> list[dict]:
    """Removes every entry (every one of ``kind``: ``kernel``, ``tuning``, ``core``,
    ``wrapper``, ``bench``); returns them."""
    if kind is None:
        return prune(older_than=-1.0)
    root = cache_dir()
    removed = []
    for entry in disk_cache.entries(root) if root.is_dir() else []:
        record = _record(entry, root)
        if record["kind"] == kind:
            disk_cache.remove(entry.path)
            removed.append(record)
    return removed


def foreign_files() -> int:
    """How many files under the cache root are not tilejit's (``disk_cache.walk``): never
    listed, changed or removed."""
    root = cache_dir()
    return disk_cache.walk(root)[1] if root.is_dir() else 0


def _left_alone() -> str:
    count = foreign_files()
    return f"; left alone: {count} files not tilejit's" if count else ""


def _when(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _human(size: int) -> str:
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size}"


def main(args) -> int:
    """``python -m tilejit cache <command>`` (docs/cli.md)."""
    import sys

    if args.cache_command == "path":
        print(cache_dir())
        return 0
    root = cache_dir()
    if os.path.lexists(root) and not os.path.isdir(root):
        print(f"python -m tilejit cache {args.cache_command}: the cache directory {root} is "
              "not a directory (kernels fall back to a private cache); set TILEJIT_CACHE_DIR "
              "to a directory", file=sys.stderr)
        return 1
    if args.cache_command == "ls":
        listed = [e for e in entries() if args.kind in (None, e["kind"])]
        if args.json:
            print(json.dumps(listed, indent=1))
            return 0
        for e in listed:
            print(f"{e['key']}  {e['kind']:<7}  {e['name']:<24}  {e['target']:<8}  "
                  f"{e['arch']:<10}  {_human(e['size']):>7}  created {_when(e['created'])}  "
                  f"used {_when(e['last_used'])}"
                  + (f"  from {e['origin']}" if e["origin"] != "local" else "")
                  + (f"  DAMAGED: {e['damaged']}" if e["damaged"] else ""))
        return 0
    if args.cache_command == "remote":
        return _remote_main(args.json)
    if args.cache_command == "size":
        listed = entries()
        total = sum(e["size"] for e in listed)
        print(f"{total} bytes ({_human(total)}) in {len(listed)} entries: {cache_dir()}")
        return 0
    if args.cache_command == "verify":
        damaged = verify(fix=args.fix)
        for e, why in damaged:
            print(f"damaged: {e['key']} ({e['kind']} {e['name']}): {why}"
                  + (" -- removed" if args.fix else ""))
        count = len(entries()) + (len(damaged) if args.fix else 0)
        print(f"{len(damaged)} of {count} entries damaged" + (", removed" if args.fix and
                                                               damaged else "")
              + _left_alone())
        return 1 if damaged and not args.fix else 0
    if args.cache_command == "prune":
        try:
            size = None if args.max_size is None else disk_cache.parse_size(args.max_size)
            age = None if args.older_than is None else disk_cache.parse_duration(args.older_than)
        except ValueError as exc:
            print(f"python -m tilejit cache prune: {exc}", file=sys.stderr)
            return 2
        if size is None and age is None:
            print("python -m tilejit cache prune: give --max-size SIZE and/or --older-than "
                  "DURATION", file=sys.stderr)
            return 2
        removed = prune(size, age)
        print(f"removed {len(removed)} entries ({_human(sum(e['size'] for e in removed))}); "
              f"{sum(e['size'] for e in entries())} bytes left{_left_alone()}")
        return 0
    removed = clear(getattr(args, "kind", None))
    print(f"removed {len(removed)} entries ({_human(sum(e['size'] for e in removed))}) from "
          f"{cache_dir()}{_left_alone()}")
    return 0


def remote_report() -> dict:
    """What ``python -m tilejit cache remote`` and ``doctor`` say of the remote cache:
    ``configured`` (False: nothing else), ``address``, ``reachable``, ``reason`` (why not),
    ``round_trip_ms``, ``entries``, ``signed`` (TILEJIT_REMOTE_CACHE_KEY set),
    ``timeout_s`` and this process's counts (``remote_cache.stats``). A malformed
    TILEJIT_REMOTE_CACHE is ``error``."""
    try:
        remote = _remote.configured()
    except env.BadValue as exc:
        return {"configured": True, "error": str(exc)}
    if remote is None:
        return {"configured": False}
    report = {"configured": True, "address": remote.address, "signed": remote.secret is not None,
              "timeout_s": remote.timeout, "wait_s": remote.wait, "reachable": False,
              "reason": None, "round_trip_ms": None, "entries": None, **_remote.stats()}
    try:
        report["round_trip_ms"] = round(remote.ping() * 1e3, 3)
        report["reachable"] = True
        report["entries"] = remote.count()
    except _remote.RemoteError as exc:
        report["reason"] = str(exc)
    return report


def _remote_main(as_json: bool) -> int:
    report = remote_report()
    if as_json:
        print(json.dumps(report, indent=1))
    elif "error" in report:
        print(f"remote cache: {report['error']}")
    elif not report["configured"]:
        print("remote cache: none (set TILEJIT_REMOTE_CACHE to redis://HOST:PORT[/DB] or "
              "file:///PATH; docs/caching.md)")
    else:
        reach = (f"yes ({report['round_trip_ms']:.1f} ms)" if report["reachable"]
                 else f"no: {report['reason']}")
        entries = report["entries"] if report["entries"] is not None else "-"
        print(f"remote cache: {report['address']}\n"
              f"reachable:    {reach}\n"
              f"entries:      {entries}\n"
              f"signing:      {'on (TILEJIT_REMOTE_CACHE_KEY)' if report['signed'] else 'off'}\n"
              f"timeout:      {report['timeout_s']:g} s per operation; waits up to "
              f"{report['wait_s']:g} s for another machine's compile\n"
              f"this process: {report['hits']} hits, {report['misses']} misses, "
              f"{report['publishes']} publishes")
    if "error" in report:
        return 2
    return 0 if not report["configured"] or report["reachable"] else 1
