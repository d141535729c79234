"""The remote cache (TILEJIT_REMOTE_CACHE) against a real redis-server and a shared
directory: hits across separate local caches, storms compiling once, a remote that goes
away, is slow or full, damaged and foreign entries, signing, the CLI.

Each "machine" is a local cache directory of its own; the remote is shared. Compiles are
counted by a compiler that logs its command lines. redis-server is Debian's
``redis-server`` package: without it these tests skip, except under CI, which installs it
(.ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from conftest import compiler_runs as _compiles
from conftest import subprocess_env

import tilejit
from tilejit import T
from tilejit.builder import remote_cache
from tilejit.native._build import disk_cache

redis = pytest.importorskip("redis", reason="the redis client (pip install 'tilejit[redis]', "
                                            "in the test extra) is not installed")


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server on 127.0.0.1 at a free port, in a temporary directory."""

    def __init__(self, workdir: Path):
        self.workdir, self.process, self.port = workdir, None, None

    def start(self) -> None:
        self.port = _free_port()
        self.process = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    if shutil.which("redis-server") is None:
        if _ci():
            pytest.fail("redis-server is not installed; CI installs Debian's redis-server "
                        "package first (.ci/run)")
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(redis_server):
    """The module's redis-server, emptied, running (a test may have stopped it)."""
    if redis_server.process.poll() is not None:
        redis_server.start()
    redis_server.client().flushall()
    redis_server.client().config_set("maxmemory", 0)
    return redis_server


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test starts as a new process would: no remote, no counts, no warning yet."""
    remote_cache.reset()
    yield
    remote_cache.reset()


@pytest.fixture
def machines(tmp_path, monkeypatch, logging_cc):
    """``machines.use(name)`` points this process at machine ``name``'s own empty local
    cache; ``machines.log`` is the file the compiler logs every run to."""
    log = tmp_path / "cc.log"
    log.touch()
    monkeypatch.setenv("TILEJIT_CC", str(logging_cc))
    monkeypatch.setenv("TILEJIT_CC_LOG", str(log))

    class Machines:
        def __init__(self):
            self.log = log

        def use(self, name: str) -> Path:
            root = tmp_path / f"machine-{name}"
            monkeypatch.setenv("TILEJIT_CACHE_DIR", str(root))
            disk_cache.reset_memo()
            return root

    return Machines()


def _program(name: str) -> tilejit.Program:
    n = T.symbol("n")
    source = (f"void {name}(const float *A, float *B, int64_t n) {{\n"
              "  for (int64_t i = 0; i < n; i++) B[i] = A[i] * 2.0f + 1.0f;\n}\n")
    return tilejit.Program(name=name, source=source,
                           params=[T.Buffer((n,), "float32", name="A"),
                                   T.Buffer((n,), "float32", name="B")])


def _name() -> str:
    return f"remote_{uuid.uuid4().hex[:10]}"


def _run(name: str, **options) -> tilejit.JITKernel:
    kernel = tilejit.compile(_program(name), out_idx=-1, **options)
    assert kernel(np.arange(4, dtype=np.float32)).tolist() == [1.0, 3.0, 5.0, 7.0]
    return kernel


def _origin(name: str) -> str:
    from tilejit.builder import cache

    (entry,) = [e for e in cache.entries() if e["name"] == name]
    return entry["origin"]


class Shared:
    """The remote, seen from the test: its URL, what it stores, and a lock another machine
    holds."""

    def __init__(self, url: str, server: RedisServer | None):
        self.url, self.server = url, server
        self.root = None if server is not None else Path(url[len("file://"):])

    def stored(self) -> dict[str, bytes]:
        """Every entry, by remote key."""
        if self.server is not None:
            client = self.server.client()
            return {k.decode().rsplit(":", 1)[1]: client.get(k)
                    for k in client.scan_iter(match="tilejit:kernel:*")}
        return {p.stem: p.read_bytes() for p in (self.root / "kernels").glob("*/*.tjrc")}

    def store(self, key: str, blob: bytes) -> None:
        if self.server is not None:
            self.server.client().set(f"tilejit:kernel:{key}", blob)
        else:
            (self.root / "kernels" / key[:2] / f"{key}.tjrc").write_bytes(blob)

    def hold_lock(self, key: str, seconds: float) -> None:
        """Another machine holds the key's lock for ``seconds`` (then dies without
        releasing it: Redis expires the lock, a shared directory's goes stale)."""
        if self.server is not None:
            self.server.client().set(f"tilejit:lock:{key}", "elsewhere:1:x",
                                     px=int(seconds * 1000))
            return
        lock = self.root / "locks" / f"{key}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text("elsewhere:1:x")
        # Stale once its mtime is older than the lock's lifetime.
        mtime = time.time() - remote_cache._LOCK_TTL_S + seconds
        os.utime(lock, (mtime, mtime))


@pytest.fixture(params=["redis", "file"])
def remote(request, tmp_path, monkeypatch) -> Shared:
    """Each kind of remote, empty and configured."""
    if request.param == "redis":
        server = request.getfixturevalue("server")
        shared = Shared(server.url, server)
    else:
        (tmp_path / "shared").mkdir()
        shared = Shared(f"file://{tmp_path / 'shared'}", None)
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", shared.url)
    return shared


# ---- Hits ------------------------------------------------------------------------------


def test_a_kernel_compiled_on_one_machine_is_a_hit_on_another(remote, machines, capfd):
    name = _name()
    machines.use("a")
    _run(name)
    assert _compiles(machines.log, name) == 1
    assert _origin(name) == "local"
    assert remote_cache.stats()["publishes"] == 1
    assert len(remote.stored()) == 1

    machines.use("b")
    kernel = _run(name)
    assert _compiles(machines.log, name) == 1  # nothing compiled on b
    assert _origin(name) == remote_cache.configured().address
    assert remote_cache.stats()["hits"] == 1
    assert Path(kernel.library_path).is_relative_to(os.environ["TILEJIT_CACHE_DIR"])
    # Installed whole in b's local cache: a later process finds it there, not remotely.
    from tilejit.builder import cache

    assert cache.verify() == []
    assert "could not be used" not in capfd.readouterr().err


def test_cache_ls_marks_entries_from_the_remote(remote, machines, child_python):
    name = _name()
    machines.use("a")
    _run(name)
    root = machines.use("b")
    _run(name)
    listed = child_python("-m", "tilejit", "cache", "ls", TILEJIT_CACHE_DIR=str(root))
    (line,) = [line for line in listed.splitlines() if name in line]
    assert line.endswith(f"from {remote_cache.configured().address}")
    as_json = json.loads(child_python("-m", "tilejit", "cache", "ls", "--json",
                                      TILEJIT_CACHE_DIR=str(root)))
    assert {e["origin"] for e in as_json if e["name"] == name} == {
        remote_cache.configured().address}


def test_verbose_logs_misses_publishes_and_hits(remote, machines, capfd):
    name = _name()
    machines.use("a")
    _run(name, verbose=True)
    err = capfd.readouterr().err
    address = remote_cache.configured().address
    assert f"remote cache {address}: {name}: miss; compiling here" in err
    assert f"remote cache {address}: {name}: published" in err
    machines.use("b")
    _run(name, verbose=True)
    assert f"remote cache {address}: {name}: hit (" in capfd.readouterr().err


def test_host_tuned_kernels_are_shared_by_machines_of_one_cpu(remote, machines):
    # -march=native is keyed by what the compiler resolves it to here (tests/
    # test_executors.py fakes a machine of another CPU, which never gets the kernel).
    name = _name()
    machines.use("a")
    _run(name, compile_flags=["-march=native"])
    assert remote_cache.stats()["publishes"] == 1
    machines.use("b")
    _run(name, compile_flags=["-march=native"])
    assert _compiles(machines.log, name) == 1
    assert remote_cache.stats()["hits"] == 1


def test_the_key_holds_the_machine_and_the_toolchain(monkeypatch):
    info = {"target": "cpu", "arch": "x86_64"}
    key = remote_cache.remote_key("k" * 64, info)
    assert key != remote_cache.remote_key("j" * 64, info)
    assert key != remote_cache.remote_key("k" * 64, {"target": "cpu", "arch": "aarch64"})
    monkeypatch.setattr(remote_cache.platform, "machine", lambda: "riscv64")
    assert key != remote_cache.remote_key("k" * 64, info)


# ---- Storms ----------------------------------------------------------------------------

_STORM_CHILD = """
import sys, numpy as np, tilejit
sys.path.insert(0, sys.argv[2])
from test_remote_cache import _program
kernel = tilejit.compile(_program(sys.argv[1]), out_idx=-1)
print(kernel(np.arange(3, dtype=np.float32)).tolist())
"""


def _seed_machine(root: Path) -> None:
    """A machine's local cache holding the core and the wrapper already (built per machine,
    not shared: copying them keeps the storm about the kernel)."""
    from tilejit.native._build import build_tools

    top = Path(os.environ["TILEJIT_CACHE_DIR"])
    for built in (build_tools.build_core_library(), build_tools.build_wrapper()):
        entry = Path(built).parent
        shutil.copytree(entry, root / entry.relative_to(top), symlinks=True)


@pytest.mark.slow  # subprocesses
def test_a_storm_of_machines_compiles_once(remote, machines, logging_cc, tmp_path):
    # The compile is slowed, so that every machine misses while the first one compiles.
    name = _name()
    roots = [tmp_path / f"storm-{i}" for i in range(5)]
    for root in roots:
        _seed_machine(root)
    before = _compiles(machines.log, name)
    children = [subprocess.Popen(
        [sys.executable, "-c", _STORM_CHILD, name, str(Path(__file__).parent)],
        env=subprocess_env(TILEJIT_CACHE_DIR=str(root), TILEJIT_CC_SLEEP="2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for root in roots]
    results = [child.communicate(timeout=300) for child in children]
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err
        assert out.strip() == "[1.0, 3.0, 5.0]"
        assert "could not be used" not in err
    assert _compiles(machines.log, name) - before == 1


def _rkey(name: str, machines, monkeypatch) -> str:
    """The remote key `name`'s kernel has: seen while a probe machine compiles it without
    a remote. Leaves this process on a fresh machine, the remote configured."""
    seen = {}
    original = remote_cache.remote_key

    def spy(key, info):
        seen["key"] = original(key, info)
        return seen["key"]

    url = os.environ["TILEJIT_REMOTE_CACHE"]
    machines.use("probe")
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", f"file://{machines.log.parent / 'probe'}")
    monkeypatch.setattr(remote_cache, "remote_key", spy)
    tilejit.compile(_program(name), out_idx=-1)
    monkeypatch.setattr(remote_cache, "remote_key", original)
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", url)
    remote_cache.reset()
    machines.use("a")
    return seen["key"]


def test_a_waiter_compiles_itself_when_the_holder_takes_too_long(remote, machines, monkeypatch):
    name = _name()
    rkey = _rkey(name, machines, monkeypatch)
    remote.hold_lock(rkey, 60)
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE_WAIT", "0.5")
    start = time.monotonic()
    _run(name)
    assert 0.5 <= time.monotonic() - start < 20
    assert remote_cache.stats()["waits"] == 1
    assert remote_cache.stats()["misses"] == 1
    assert _compiles(machines.log, name) == 2  # the probe's and this one


def test_a_crashed_holder_frees_the_key(remote, machines, monkeypatch):
    name = _name()
    rkey = _rkey(name, machines, monkeypatch)
    remote.hold_lock(rkey, 1.0)
    start = time.monotonic()
    _run(name)
    assert time.monotonic() - start < 20  # not TILEJIT_REMOTE_CACHE_WAIT (300 s)
    assert remote_cache.stats()["waits"] == 1
    assert remote_cache.stats()["publishes"] == 1
    assert list(remote.stored()) == [rkey]


def test_file_store_keeps_entries_whole_under_concurrent_publishers(tmp_path):
    store = remote_cache._FileStore(str(tmp_path))
    key = "ab" * 32
    blobs = [remote_cache.pack(key, "kernel.so", bytes([i]) * (200_000 + i), {}, None)
             for i in range(8)]
    problems = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            blob = store.get(key)
            if blob is not None:
                try:
                    remote_cache.unpack(blob, key, "kernel.so", None)
                except remote_cache.BadEntry as exc:
                    problems.append(str(exc))

    def publish(blob: bytes) -> None:
        for _ in range(20):
            store.put(key, blob)

    readers = [threading.Thread(target=read) for _ in range(2)]
    publishers = [threading.Thread(target=publish, args=(b,)) for b in blobs]
    for thread in readers + publishers:
        thread.start()
    for thread in publishers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert problems == []
    assert store.get(key) in blobs
    assert [p.name for p in (tmp_path / "kernels" / key[:2]).iterdir()] == [f"{key}.tjrc"]


# ---- Never a failure -------------------------------------------------------------------


def test_a_remote_that_goes_away_mid_run_costs_a_local_compile(server, machines, monkeypatch,
                                                              capfd):
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", server.url)
    machines.use("a")
    _run(_name())
    assert remote_cache.stats()["publishes"] == 1
    server.stop()
    first, second = _name(), _name()
    _run(first)
    err = capfd.readouterr().err
    assert err.count("could not be used") == 1
    assert f"the remote cache {server.url} could not be used (" in err
    assert "Connection refused" in err or "ConnectionError" in err
    start = time.monotonic()
    _run(second)  # the dead remote is left alone for a while: no second attempt, no warning
    assert time.monotonic() - start < 5
    assert "could not be used" not in capfd.readouterr().err
    assert _compiles(machines.log, first) == _compiles(machines.log, second) == 1


def test_a_shared_directory_that_is_not_there_is_never_created(machines, monkeypatch, capfd,
                                                                tmp_path):
    missing = tmp_path / "not-mounted" / "tilejit"
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", f"file://{missing}")
    machines.use("a")
    name = _name()
    _run(name)
    assert f"{missing} is not a directory (is the shared filesystem mounted?)" in \
        capfd.readouterr().err
    assert not missing.parent.exists()
    assert _compiles(machines.log, name) == 1


def test_a_slow_remote_is_bounded_by_the_timeout(server, machines, monkeypatch, capfd):
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", server.url)
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE_TIMEOUT", "0.3")
    machines.use("a")
    name = _name()
    server.client().execute_command("CLIENT", "PAUSE", "4000", "ALL")
    try:
        start = time.monotonic()
        _run(name)
        elapsed = time.monotonic() - start
    finally:
        server.client().execute_command("CLIENT", "UNPAUSE")
    assert elapsed < 3.5, elapsed
    err = capfd.readouterr().err
    assert "TILEJIT_REMOTE_CACHE_TIMEOUT=0.3 s" in err or "Timeout" in err
    assert _compiles(machines.log, name) == 1


def test_a_full_remote_costs_only_the_publication(server, machines, monkeypatch, capfd):
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", server.url)
    client = server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    try:
        machines.use("a")
        _run(_name())
    finally:
        client.config_set("maxmemory", 0)
    err = capfd.readouterr().err
    # Redis refuses the lock and the entry alike: full, it says so.
    assert "could not be used (" in err and "OutOfMemoryError" in err
    assert remote_cache.stats()["publishes"] == 0


def _damaged(blob: bytes, how: str) -> bytes:
    header_end = blob.index(b"\n", 6)
    if how == "flipped":
        return blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:]
    if how == "truncated":
        return blob[:len(blob) // 2]
    if how == "garbage":
        return b"\x00" * 100
    header = json.loads(blob[6:header_end])
    header["key"] = "f" * 64  # "foreign": published for another key
    return b"TJRC1\n" + json.dumps(header).encode() + blob[header_end:]


@pytest.mark.parametrize("how", ["flipped", "truncated", "garbage", "foreign"])
def test_damaged_or_foreign_entries_are_refused_and_replaced(remote, machines, how, capfd):
    name = _name()
    machines.use("a")
    _run(name)
    ((rkey, blob),) = remote.stored().items()
    remote.store(rkey, _damaged(blob, how))
    machines.use("b")
    _run(name)  # compiled locally, correct results
    assert _compiles(machines.log, name) == 2
    err = capfd.readouterr().err
    assert "an entry was refused" in err
    assert remote_cache.stats()["refused"] == 1
    from tilejit.builder import cache

    assert cache.verify() == [] and _origin(name) == "local"
    # b published a good entry over the bad one: c hits.
    remote_cache.reset()
    machines.use("c")
    _run(name)
    assert _compiles(machines.log, name) == 2


def test_an_entry_whose_library_is_not_whole_is_refused(remote, machines, capfd):
    name = _name()
    machines.use("a")
    _run(name)
    ((rkey, blob),) = remote.stored().items()
    # Hashes that match, a library that does not: an ELF header promising more than is there.
    library = remote_cache.unpack(blob, rkey, "kernel.so", None)
    remote.store(rkey, remote_cache.pack(rkey, "kernel.so", library[:4096], {}, None))
    machines.use("b")
    _run(name)
    assert "is unusable" in capfd.readouterr().err
    assert _compiles(machines.log, name) == 2


def test_a_malformed_remote_is_a_message_naming_the_variable(machines, monkeypatch):
    machines.use("a")
    for variable, value in (("TILEJIT_REMOTE_CACHE", "http://cache:80"),
                            ("TILEJIT_REMOTE_CACHE", "redis://host:port"),
                            ("TILEJIT_REMOTE_CACHE", "file://relative/path")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ValueError, match=f"^{variable}='{value}': expected redis://"):
            tilejit.compile(_program(_name()), out_idx=-1)
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", "redis://127.0.0.1:1")
    for value in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("TILEJIT_REMOTE_CACHE_TIMEOUT", value)
        with pytest.raises(ValueError, match="^TILEJIT_REMOTE_CACHE_TIMEOUT=.*: expected a "
                                             "number of seconds greater than 0"):
            tilejit.compile(_program(_name()), out_idx=-1)


# ---- Trust -----------------------------------------------------------------------------


def test_signed_entries(remote, machines, monkeypatch, capfd):
    name = _name()
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE_KEY", "the right key, long enough")
    machines.use("a")
    _run(name)
    machines.use("b")  # the same key: a hit
    _run(name)
    assert _compiles(machines.log, name) == 1

    monkeypatch.setenv("TILEJIT_REMOTE_CACHE_KEY", "another key")
    remote_cache.reset()
    machines.use("c")
    _run(name)
    assert _compiles(machines.log, name) == 2
    assert "signature does not match TILEJIT_REMOTE_CACHE_KEY" in capfd.readouterr().err

    # c published, signed with its own key: without any key, it is accepted unverified.
    monkeypatch.delenv("TILEJIT_REMOTE_CACHE_KEY")
    remote_cache.reset()
    machines.use("d")
    _run(name)
    assert _compiles(machines.log, name) == 2


def test_unsigned_entries_are_refused_when_a_key_is_set(remote, machines, monkeypatch, capfd):
    name = _name()
    machines.use("a")
    _run(name)  # published unsigned
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE_KEY", "a key")
    machines.use("b")
    _run(name)
    assert "unsigned and TILEJIT_REMOTE_CACHE_KEY is set" in capfd.readouterr().err
    assert _compiles(machines.log, name) == 2


def test_a_signature_covers_the_files():
    key, secret = "cd" * 32, b"secret"
    blob = remote_cache.pack(key, "kernel.so", b"\x7fELF" + b"x" * 100, {}, secret)
    end = blob.index(b"\n", 6)
    header = json.loads(blob[6:end])
    header["files"][0]["sha256"] = "0" * 64  # a header re-pointed at other bytes
    forged = b"TJRC1\n" + json.dumps(header).encode() + b"\n" + b"y" * 104
    with pytest.raises(remote_cache.BadEntry, match="signature does not match"):
        remote_cache.unpack(forged, key, "kernel.so", secret)
    assert remote_cache.unpack(blob, key, "kernel.so", secret).startswith(b"\x7fELF")


# ---- Visible ---------------------------------------------------------------------------


def test_cache_remote_command(server, child_python, tmp_path):
    shown = child_python("-m", "tilejit", "cache", "remote", TILEJIT_REMOTE_CACHE=server.url)
    assert f"remote cache: {server.url}\nreachable:    yes (" in shown
    assert "entries:      0" in shown and "signing:      off" in shown
    assert "this process: 0 hits, 0 misses, 0 publishes" in shown
    server.client().set("tilejit:kernel:" + "a" * 64, b"x")
    report = json.loads(child_python("-m", "tilejit", "cache", "remote", "--json",
                                     TILEJIT_REMOTE_CACHE=server.url,
                                     TILEJIT_REMOTE_CACHE_KEY="k"))
    assert report["reachable"] and report["entries"] == 1 and report["signed"]
    doctor = json.loads(child_python("-m", "tilejit", "doctor", "--json",
                                     TILEJIT_REMOTE_CACHE=server.url))
    assert doctor["remote_cache"]["address"] == server.url
    assert doctor["remote_cache"]["reachable"]

    down = subprocess.run([sys.executable, "-m", "tilejit", "cache", "remote"],
                          env=subprocess_env(TILEJIT_REMOTE_CACHE=f"redis://127.0.0.1:"
                                             f"{_free_port()}"),
                          capture_output=True, text=True, check=False)
    assert down.returncode == 1 and "reachable:    no: reaching it failed" in down.stdout
    none = subprocess.run([sys.executable, "-m", "tilejit", "cache", "remote"],
                          env=subprocess_env(), capture_output=True, text=True, check=False)
    assert none.returncode == 0 and none.stdout.startswith("remote cache: none")
    bad = subprocess.run([sys.executable, "-m", "tilejit", "cache", "remote"],
                         env=subprocess_env(TILEJIT_REMOTE_CACHE="ftp://x"),
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "TILEJIT_REMOTE_CACHE='ftp://x': expected" in bad.stdout


# ---- CUDA images -----------------------------------------------------------------------

_SCALE = """
extern "C" __global__ void %s(const float *X, float *Y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) Y[i] = 2.0f * X[i];
}
"""


def _cuda_compiler() -> str:
    from conftest import no_nvrtc

    from tilejit.builder import cuda_compiler

    if cuda_compiler.find_nvcc() is not None:
        return "nvcc"
    if not no_nvrtc():
        return "nvrtc"
    pytest.skip("neither nvcc nor NVRTC is installed")


def _cuda_program(name: str) -> tilejit.Program:
    n = T.symbol("n")
    return tilejit.Program(name, [T.Buffer((n,), "float32", name="X", const=True),
                                  T.Buffer((n,), "float32", name="Y")],
                           _SCALE % name, grid=(T.ceildiv(n, 128),), block=(128,))


def test_cuda_images_are_shared_and_checked(remote, machines, capfd):
    from tilejit.builder import cuda_compiler
    from tilejit.builder.signature import lower

    compiler, name = _cuda_compiler(), _name()
    program = _cuda_program(name)
    signature = lower(program, -1, "cuda")
    machines.use("a")
    built, _ = cuda_compiler.compile_program(program, signature, [], "sm_80", compiler)
    assert remote_cache.stats()["publishes"] == 1
    image = built.read_bytes()
    machines.use("b")
    fetched, _ = cuda_compiler.compile_program(program, signature, [], "sm_80", compiler)
    assert remote_cache.stats()["hits"] == 1
    assert fetched.read_bytes() == image and fetched != built
    # Another architecture is another key: a miss, compiled here.
    cuda_compiler.compile_program(program, signature, [], "sm_90", compiler)
    assert remote_cache.stats()["misses"] == 2

    # A whole image that does not define the kernel (well hashed, so only the check can
    # tell) is refused.
    (rkey,) = [k for k, b in remote.stored().items()
               if remote_cache.unpack(b, k, built.name, None) == image]
    other = _cuda_program(name + "_other")
    other_image, _ = cuda_compiler.compile_program(other, lower(other, -1, "cuda"), [],
                                                   "sm_80", compiler)
    remote.store(rkey, remote_cache.pack(rkey, built.name, other_image.read_bytes(), {}, None))
    machines.use("c")
    again, _ = cuda_compiler.compile_program(program, signature, [], "sm_80", compiler)
    assert again.read_bytes() != other_image.read_bytes()
    assert f"defines no kernel '{name}'" in capfd.readouterr().err


def test_without_the_redis_client_kernels_compile_with_one_line_saying_how_to_install_it(
        machines, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` raises ImportError
    monkeypatch.setenv("TILEJIT_REMOTE_CACHE", "redis://127.0.0.1:6379/0")
    machines.use("a")
    name = _name()
    _run(name)
    _run(_name())
    err = capfd.readouterr().err
    assert err.count("could not be used") == 1
    assert 'the redis package is not installed: pip install "tilejit[redis]"' in err
    assert _compiles(machines.log, name) == 1
