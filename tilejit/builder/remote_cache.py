"""The remote cache: compiled kernels shared between machines (``TILEJIT_REMOTE_CACHE``).

A kernel missing from the local cache is looked up on the remote before it is compiled;
a hit is verified and installed in the local cache, and nothing is compiled. A kernel
compiled locally is published for the other machines. Two stores are supported:

- ``redis://HOST:PORT[/DB]`` (or ``rediss://`` for TLS): a Redis server, through the
  ``redis`` client (``pip install "tilejit[redis]"``);
- ``file:///PATH``: a directory on a filesystem every machine mounts (NFS, Lustre, a
  mounted bucket).

How a lookup goes (``around``, called under the local entry's lock, so one process per
machine talks to the remote for a key)::

    fetch --hit--> verify (format, key, sizes, SHA-256, signature, the local check) --> install
      |miss
    lock the key on the remote --taken--> compile, publish, unlock
      |held by another machine
    wait for its publication (polling) --> install, or take the lock once the holder is gone,
                                           or compile anyway after TILEJIT_REMOTE_CACHE_WAIT

The remote never fails a call: a store that is down, slow (each operation is bounded by
``TILEJIT_REMOTE_CACHE_TIMEOUT``), full, or that returns a damaged or foreign entry costs
a local compile and one line on stderr per process, naming the remote and the reason.
After a connection failure the remote is left alone for ``_RETRY_AFTER_S`` seconds, so a
dead server does not cost a timeout per kernel.

An entry is one blob::

    TJRC1\\n
    <header: one line of JSON>\\n
    <the files' bytes, in the header's order>

The header holds the format, the remote key, each file's name, size and SHA-256, what the
kernel is (name, target, arch), the tilejit version that published it and, with
``TILEJIT_REMOTE_CACHE_KEY`` set, ``signature``: HMAC-SHA256 under that key of the header's
canonical JSON without the signature. Since the header holds every file's SHA-256, the
signature covers the files too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import platform
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..native._build import env
from ..version import VERSION

__all__ = ["BadEntry", "Remote", "RemoteError", "configured", "pack", "remote_key", "reset", "stats",
           "unpack"]

_MAGIC = b"TJRC1\n"
_FORMAT = 1
# The lock a compiling machine holds on a key expires this long after its last refresh;
# the holder refreshes it every third of that while it compiles. A crashed holder frees
# the key after at most this long.
_LOCK_TTL_S = 30.0
# How long a remote that failed to answer is left alone before it is tried again.
_RETRY_AFTER_S = 30.0
_DEFAULT_TIMEOUT_S = 2.0
# How long a machine waits for another one's compile of the same key before compiling the
# kernel itself: the compilers' own time limit.
_DEFAULT_WAIT_S = 300.0


class RemoteError(Exception):
    """The remote could not be used for one operation; the message says why."""


class BadEntry(RemoteError):
    """A remote entry that must not be installed: damaged, truncated, foreign or unsigned."""


# ---- Configuration ---------------------------------------------------------------------


def _parse_url(value: str) -> tuple[str, str, str]:
    """``(scheme, address shown to users, location)`` of a ``TILEJIT_REMOTE_CACHE`` value;
    ``ValueError`` saying what is wrong."""
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"a file:// URL names no host: file:///PATH, not host "
                             f"{parts.netloc!r}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError("a file:// URL needs an absolute path: file:///PATH")
        return "file", f"file://{path}", path
    if scheme in ("redis", "rediss"):
        try:
            host, port = parts.hostname, parts.port
        except ValueError as exc:  # a port that is not a number, or out of range
            raise ValueError(f"bad port ({exc})") from None
        if not host:
            raise ValueError(f"a {scheme}:// URL needs a host: {scheme}://HOST:PORT[/DB]")
        db = parts.path.strip("/") or "0"
        if not db.isdigit():
            raise ValueError(f"the database after the port must be a number, got {db!r}")
        if parts.query or parts.fragment:
            raise ValueError("options after '?' or '#' are not supported")
        port = port or 6379
        shown_host = f"[{host}]" if ":" in host else host
        return scheme, f"{scheme}://{shown_host}:{port}/{db}", value
    raise ValueError(f"the scheme is {parts.scheme!r}" if parts.scheme else "no scheme")


_ACCEPTED = ("redis://HOST:PORT[/DB], rediss://HOST:PORT[/DB] (TLS) or file:///PATH (a "
             "shared directory)")

_configured_lock = threading.Lock()
_remotes: dict[tuple[str, float, float, str], Remote] = {}


def configured() -> Remote | None:
    """The remote named by ``TILEJIT_REMOTE_CACHE``, or None when it is unset. A value
    that is no remote's URL, and a bad ``TILEJIT_REMOTE_CACHE_TIMEOUT`` or
    ``TILEJIT_REMOTE_CACHE_WAIT``, are ``env.BadValue`` naming the variable."""
    parsed = env.parsed("TILEJIT_REMOTE_CACHE", _parse_url, _ACCEPTED)
    if parsed is None:
        return None
    scheme, address, location = parsed  # type: ignore[misc]
    value = env.text("TILEJIT_REMOTE_CACHE")
    timeout = env.seconds("TILEJIT_REMOTE_CACHE_TIMEOUT", _DEFAULT_TIMEOUT_S)
    wait = env.seconds("TILEJIT_REMOTE_CACHE_WAIT", _DEFAULT_WAIT_S)
    secret = env.text("TILEJIT_REMOTE_CACHE_KEY")
    with _configured_lock:
        remote = _remotes.get((value, timeout, wait, secret))
        if remote is None:
            store = _FileStore(location) if scheme == "file" else _RedisStore(location, timeout)
            remote = Remote(store, address, timeout, wait, secret.encode() or None)
            _remotes[(value, timeout, wait, secret)] = remote
        return remote


# ---- This process's counts -------------------------------------------------------------

_stats_lock = threading.Lock()
_stats = {"hits": 0, "misses": 0, "publishes": 0, "waits": 0, "refused": 0, "errors": 0}


def _count(what: str) -> None:
    with _stats_lock:
        _stats[what] += 1


def stats() -> dict[str, int]:
    """This process's remote lookups: ``hits`` (installed from the remote), ``misses``
    (compiled here), ``publishes``, ``waits`` (for another machine's compile), ``refused``
    (entries not installed: damaged, foreign, unsigned) and ``errors`` (the remote failed)."""
    with _stats_lock:
        return dict(_stats)


_warned = False


def reset() -> None:
    """Forget the remotes, counts and the warning, as a new process would (for tests)."""
    global _warned
    with _configured_lock:
        _remotes.clear()
    with _stats_lock:
        _stats.update(dict.fromkeys(_stats, 0))
        _warned = False


def _warn(address: str, reason: str) -> None:
    """One line on stderr, the first time this process cannot use a remote. Never a
    Python warning: one turned into an error (``-W error``) would fail the call."""
    global _warned
    with _stats_lock:
        if _warned:
            return
        _warned = True
    print(f"tilejit: the remote cache {address} could not be used ({reason}); kernels are "
          "compiled locally (shown once per process; TILEJIT_VERBOSE=1 logs every remote "
          "lookup)", file=sys.stderr, flush=True)


# ---- Entries -----------------------------------------------------------------------------


def remote_key(key: str, info: dict) -> str:
    """The remote name of a local cache key: the local key already holds the source, the
    signature, the options, the compiler and its version, and the target's arch; the
    machine's architecture and system are added, since a compiler's version line does not
    always say which machine it builds for."""
    text = json.dumps({"tilejit-remote": _FORMAT, "key": key, "target": info.get("target"),
                       "arch": info.get("arch"), "machine": platform.machine(),
                       "system": platform.system()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(header: dict) -> bytes:
    unsigned = {k: v for k, v in header.items() if k != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def _sign(secret: bytes, header: dict) -> str:
    return hmac.new(secret, _canonical(header), hashlib.sha256).hexdigest()


def pack(rkey: str, name: str, data: bytes, info: dict, secret: bytes | None) -> bytes:
    """An entry holding one file ``name`` with ``data``, signed when ``secret`` is given."""
    header = {"format": _FORMAT, "key": rkey, "tilejit": VERSION, "created": time.time(),
              "publisher": platform.node(),
              "files": [{"name": name, "size": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()}],
              "info": {k: info[k] for k in ("name", "target", "arch") if k in info}}
    if secret is not None:
        header["signature"] = _sign(secret, header)
    line = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return _MAGIC + line + b"\n" + data


def unpack(blob: bytes, rkey: str, name: str, secret: bytes | None) -> bytes:
    """The file ``name`` of an entry published under ``rkey``, checked: ``BadEntry`` saying
    why when the entry is damaged, truncated, published under another key, holds another
    file, or (with ``secret``) is unsigned or signed with another key."""
    if not blob.startswith(_MAGIC):
        raise BadEntry("not a tilejit remote entry (bad magic)")
    end = blob.find(b"\n", len(_MAGIC))
    if end < 0:
        raise BadEntry("the entry's header is cut off")
    try:
        header = json.loads(blob[len(_MAGIC):end])
    except ValueError as exc:
        raise BadEntry(f"the entry's header is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise BadEntry(f"unknown entry format {header.get('format') if isinstance(header, dict) else header!r}")
    if header.get("key") != rkey:
        raise BadEntry(f"a foreign entry: published for key {str(header.get('key'))[:16]}..., "
                       f"looked up as {rkey[:16]}...")
    files = header.get("files")
    if (not isinstance(files, list) or len(files) != 1 or not isinstance(files[0], dict)
            or files[0].get("name") != name):
        raise BadEntry(f"the entry does not hold one file named {name}")
    size, digest = files[0].get("size"), files[0].get("sha256")
    if secret is not None:
        signature = header.get("signature")
        if not isinstance(signature, str):
            raise BadEntry("the entry is unsigned and TILEJIT_REMOTE_CACHE_KEY is set")
        if not hmac.compare_digest(signature, _sign(secret, header)):
            raise BadEntry("the entry's signature does not match TILEJIT_REMOTE_CACHE_KEY")
    data = blob[end + 1:]
    if not isinstance(size, int) or len(data) != size:
        raise BadEntry(f"the entry is truncated or padded: {len(data)} bytes of {name}, "
                       f"the header says {size}")
    if hashlib.sha256(data).hexdigest() != digest:
        raise BadEntry(f"{name}'s SHA-256 does not match the entry's header")
    return data


# ---- The remote ------------------------------------------------------------------------


class Remote:
    """One configured remote: its store, how long an operation may take, how long to wait
    for another machine's compile, and the signing key."""

    def __init__(self, store, address: str, timeout: float, wait: float,
                 secret: bytes | None):
        self.store, self.address, self.timeout = store, address, timeout
        self.wait, self.secret = wait, secret
        self._down_until = 0.0

    # Every store operation goes through `_call`: bounded by the timeout, and a failure
    # becomes a RemoteError (the store left alone for a while if it did not answer).
    def _call(self, what: str, operation: Callable, *args):
        try:
            return _bounded(operation, args, self.timeout)
        except TimeoutError:
            self._down_until = time.monotonic() + _RETRY_AFTER_S
            raise RemoteError(f"{what} took longer than TILEJIT_REMOTE_CACHE_TIMEOUT="
                              f"{self.timeout:g} s") from None
        except RemoteError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store's client raises its own types
            if _is_connection_error(exc):
                self._down_until = time.monotonic() + _RETRY_AFTER_S
            raise RemoteError(f"{what} failed: {type(exc).__name__}: {exc}") from None

    def ping(self) -> float:
        """Seconds one round trip took; ``RemoteError`` when the remote cannot answer."""
        self._call("reaching it", self.store.ping)  # connects (and imports the client)
        start = time.perf_counter()
        self._call("reaching it", self.store.ping)
        return time.perf_counter() - start

    def count(self) -> int:
        """How many entries the remote holds."""
        return self._call("counting entries", self.store.count)

    def around(self, key: str, build: Callable[[Path], object], artifact_name: str,
               check: Callable[[str], str | None] | None, info: dict,
               verbose: bool) -> Callable[[Path], dict | None]:
        """``build`` wrapped for the local cache: the wrapped build installs the remote's
        entry when it has a good one, else runs ``build`` (once per key across machines
        when they race) and publishes what it wrote. Returns the fields the local entry's
        meta.json gets: where the artifact came from."""
        rkey = remote_key(key, info)
        label = info.get("name") or key[:16]

        def log(message: str) -> None:
            if verbose:
                print(f"tilejit: remote cache {self.address}: {label}: {message}",
                      file=sys.stderr, flush=True)

        def remote_build(out: Path) -> dict | None:
            start = time.perf_counter()
            if not self._down() and self._install(rkey, out, artifact_name, check, log):
                log(f"hit ({out.stat().st_size} bytes, "
                    f"{(time.perf_counter() - start) * 1e3:.1f} ms)")
                return {"origin": "remote", "remote": self.address}
            token = None
            if not self._down():
                token = self._lock(rkey)
                if token is None and not self._down():
                    if self._wait_for_other(rkey, out, artifact_name, check, log):
                        return {"origin": "remote", "remote": self.address}
                    if not self._down():
                        token = self._lock(rkey)
            _count("misses")
            log("miss; compiling here")
            heartbeat = _Heartbeat(self, rkey, token) if token is not None else None
            try:
                build(out)
                if not self._down():
                    self._publish(rkey, out, artifact_name, check, info, log)
            finally:
                if heartbeat is not None:
                    heartbeat.stop()
                    self._try("releasing the lock", self.store.release, rkey, token)
            return None

        return remote_build

    def _try(self, what: str, operation: Callable, *args):
        """``operation(*args)`` through `_call`; None, counted and warned about, on a
        RemoteError."""
        try:
            return self._call(what, operation, *args)
        except RemoteError as exc:
            _count("errors")
            _warn(self.address, str(exc))
            return None

    def _install(self, rkey: str, out: Path, artifact_name: str,
                 check: Callable[[str], str | None] | None, log) -> bool:
        """Writes the remote's entry for ``rkey`` to ``out`` if it has one that passes
        every check; False (nothing written) otherwise."""
        blob = self._try("fetching an entry", self.store.get, rkey)
        if blob is None:
            return False
        try:
            data = unpack(blob, rkey, artifact_name, self.secret)
            out.write_bytes(data)
            problem = check(str(out)) if check is not None else None
            if problem is not None:
                raise BadEntry(f"{artifact_name} is unusable: {problem}")
        except BadEntry as exc:
            out.unlink(missing_ok=True)
            _count("refused")
            _warn(self.address, f"an entry was refused: {exc}")
            log(f"refused the remote entry: {exc}")
            return False
        _count("hits")
        return True

    def _down(self) -> bool:
        """Whether the remote failed to answer moments ago (and is left alone for now)."""
        return time.monotonic() < self._down_until

    def _lock(self, rkey: str) -> str | None:
        """A token if this process now holds the key's lock; None if another machine holds
        it (or the remote cannot say)."""
        token = f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex}"
        taken = self._try("taking a lock", self.store.acquire, rkey, token, _LOCK_TTL_S)
        return token if taken else None

    def _wait_for_other(self, rkey: str, out: Path, artifact_name: str,
                        check: Callable[[str], str | None] | None, log) -> bool:
        """Waits while another machine holds the key's lock; True once its entry is
        installed. False when the lock is gone without an entry (the holder failed or
        died), when the remote fails, or after TILEJIT_REMOTE_CACHE_WAIT seconds."""
        _count("waits")
        log("another machine is compiling it; waiting")
        deadline = time.monotonic() + self.wait
        pause = 0.02
        while time.monotonic() < deadline:
            state = self._try("polling an entry", self.store.state, rkey)
            if state is None:
                return False
            present, locked = state
            if present:
                return self._install(rkey, out, artifact_name, check, log)
            if not locked:
                return False
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)
        log(f"waited TILEJIT_REMOTE_CACHE_WAIT={self.wait:g} s; compiling here")
        return False

    def _publish(self, rkey: str, out: Path, artifact_name: str,
                 check: Callable[[str], str | None] | None, info: dict, log) -> None:
        if not out.is_file() or (check is not None and check(str(out)) is not None):
            return  # the local cache refuses it too, and says why
        blob = pack(rkey, artifact_name, out.read_bytes(), info, self.secret)
        if self._try("publishing an entry", self.store.put, rkey, blob) is not None:
            _count("publishes")
            log(f"published ({len(blob)} bytes)")


class _Heartbeat:
    """Refreshes a held lock while its holder compiles, so a long compile keeps it and a
    crashed holder loses it after the lock's lifetime."""

    def __init__(self, remote: Remote, rkey: str, token: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(remote, rkey, token),
                                        name="tilejit-remote-lock", daemon=True)
        self._thread.start()

    def _run(self, remote: Remote, rkey: str, token: str) -> None:
        while not self._stop.wait(_LOCK_TTL_S / 3):
            try:
                remote._call("refreshing a lock", remote.store.refresh, rkey, token,
                             _LOCK_TTL_S)
            except RemoteError:
                pass

    def stop(self) -> None:
        self._stop.set()


def _bounded(operation: Callable, args: tuple, timeout: float):
    """``operation(*args)``, or TimeoutError after ``timeout`` seconds: a filesystem that
    hangs (a dead NFS server) cannot hold the call; the operation is left to finish on its
    own daemon thread."""
    done = threading.Event()
    result: list = [None, None]

    def run() -> None:
        try:
            result[0] = operation(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result[1] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="tilejit-remote", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError
    if result[1] is not None:
        raise result[1]
    return result[0]


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConnectionError", "TimeoutError", "BusyLoadingError"})


# ---- Stores ----------------------------------------------------------------------------
#
# A store keeps blobs by remote key and one expiring lock per key:
#   get(key) -> bytes | None         put(key, blob)             state(key) -> (present, locked)
#   acquire(key, token, ttl) -> bool  refresh(key, token, ttl)   release(key, token)
#   ping()                            count() -> int


class _RedisStore:
    """A Redis server: ``tilejit:kernel:<key>`` holds an entry, ``tilejit:lock:<key>`` a
    lock (SET NX with an expiry). Entries never expire on their own: give the server a
    ``maxmemory`` and ``maxmemory-policy allkeys-lru`` to bound it (docs/caching.md)."""

    _RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('del', KEYS[1]) else return 0 end")
    _REFRESH = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end")

    def __init__(self, url: str, timeout: float):
        self._url, self._timeout = url, timeout
        self._client = None
        self._lock = threading.Lock()

    def _redis(self):
        with self._lock:
            if self._client is None:
                try:
                    import redis
                except ImportError:
                    raise RemoteError("the redis package is not installed: pip install "
                                      '"tilejit[redis]"') from None
                self._client = redis.Redis.from_url(
                    self._url, socket_timeout=self._timeout,
                    socket_connect_timeout=self._timeout, retry_on_timeout=False)
            return self._client

    @staticmethod
    def _entry(key: str) -> str:
        return f"tilejit:kernel:{key}"

    @staticmethod
    def _lock_name(key: str) -> str:
        return f"tilejit:lock:{key}"

    def get(self, key: str) -> bytes | None:
        return self._redis().get(self._entry(key))

    def put(self, key: str, blob: bytes) -> bool:
        self._redis().set(self._entry(key), blob)
        return True

    def state(self, key: str) -> tuple[bool, bool]:
        pipe = self._redis().pipeline(transaction=False)
        pipe.exists(self._entry(key))
        pipe.exists(self._lock_name(key))
        present, locked = pipe.execute()
        return bool(present), bool(locked)

    def acquire(self, key: str, token: str, ttl: float) -> bool:
        return bool(self._redis().set(self._lock_name(key), token, nx=True,
                                      px=int(ttl * 1000)))

    def refresh(self, key: str, token: str, ttl: float) -> bool:
        return bool(self._redis().eval(self._REFRESH, 1, self._lock_name(key), token,
                                       int(ttl * 1000)))

    def release(self, key: str, token: str) -> bool:
        self._redis().eval(self._RELEASE, 1, self._lock_name(key), token)
        return True

    def ping(self) -> None:
        self._redis().ping()

    def count(self) -> int:
        return sum(1 for _ in self._redis().scan_iter(match="tilejit:kernel:*", count=1000))


class _FileStore:
    """A shared directory: ``<root>/kernels/<key[:2]>/<key>.tjrc`` holds an entry, written
    to a private name and renamed into place (atomic on one filesystem, so concurrent
    publishers and readers see one whole entry or none); ``<root>/locks/<key>.lock`` is a
    lock, made with O_EXCL and holding its owner's token, stale once its mtime is older
    than its lifetime."""

    def __init__(self, root: str):
        self.root = Path(root)

    def _mounted(self) -> None:
        """The root must exist: a missing one is a filesystem that is not mounted here, and
        creating it would publish onto this machine's own disk."""
        if not self.root.is_dir():
            raise RemoteError(f"{self.root} is not a directory (is the shared filesystem "
                              "mounted?)")

    def _entry(self, key: str) -> Path:
        return self.root / "kernels" / key[:2] / f"{key}.tjrc"

    def _lock_path(self, key: str) -> Path:
        return self.root / "locks" / f"{key}.lock"

    def get(self, key: str) -> bytes | None:
        try:
            return self._entry(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, blob: bytes) -> bool:
        self._mounted()
        path = self._entry(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.parent / f".tmp-{uuid.uuid4().hex}"
        try:
            with open(temporary, "xb") as handle:
                handle.write(blob)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def state(self, key: str) -> tuple[bool, bool]:
        return self._entry(key).is_file(), self._live_lock(key) is not None

    def _live_lock(self, key: str) -> str | None:
        """The token of the key's lock if it is held and not stale."""
        path = self._lock_path(key)
        try:
            if time.time() - path.stat().st_mtime > _LOCK_TTL_S:
                return None
            return path.read_text()
        except FileNotFoundError:
            return None

    def acquire(self, key: str, token: str, ttl: float) -> bool:
        self._mounted()
        path = self._lock_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    stale = time.time() - path.stat().st_mtime > ttl
                except FileNotFoundError:
                    continue
                if not stale:
                    return False
                # A stale lock is moved aside under a private name, so that two machines
                # breaking it at once cannot remove each other's fresh lock.
                aside = path.with_name(f".stale-{uuid.uuid4().hex}")
                try:
                    os.rename(path, aside)
                    aside.unlink()
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(token)
            return True
        return False

    def refresh(self, key: str, token: str, ttl: float) -> bool:
        path = self._lock_path(key)
        if self._live_lock(key) != token:
            return False
        os.utime(path)
        return True

    def release(self, key: str, token: str) -> bool:
        path = self._lock_path(key)
        try:
            if path.read_text() == token:
                path.unlink()
        except FileNotFoundError:
            pass
        return True

    def ping(self) -> None:
        self._mounted()
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise RemoteError(f"{self.root} is not writable")

    def count(self) -> int:
        kernels = self.root / "kernels"
        return sum(1 for _ in kernels.glob("*/*.tjrc")) if kernels.is_dir() else 0
