"""The managed cache: ``python -m tilejit cache ls/size/verify/prune/clear/path``,
``TILEJIT_CACHE_MAX_SIZE``, and removal while other processes use the cache.

Each test has a cache of its own, seeded with the session's core and wrapper (so that no
test builds them again), and fills it from child processes as users would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT

import tilejit
from tilejit import T
from tilejit.builder import cache as tcache

# A child that compiles and runs the kernels scale_<i> for the given i (distinct sources,
# so distinct cache entries), printing their results.
CHILD = textwrap.dedent("""
    import sys, numpy as np, tilejit
    from tilejit import T
    n = T.symbol("n")
    for i in map(int, sys.argv[1:]):
        source = ("void scale_%d(const float *X, float *Y, int64_t n) {\\n"
                  "  for (int64_t j = 0; j < n; ++j) Y[j] = X[j] * %d;\\n}\\n" % (i, i))
        k = tilejit.compile(tilejit.Program("scale_%d" % i, [
            T.Buffer((n,), "float32", name="X", const=True),
            T.Buffer((n,), "float32", name="Y")], source), out_idx=-1)
        print(i, k(np.ones(3, np.float32)).tolist())
""")


@pytest.fixture
def cache(tilejit_cache_dir, tmp_path):
    # The session's core and wrapper exist once a kernel has run.
    n = T.symbol("n")
    tilejit.compile(tilejit.Program("noop", [T.Buffer((n,), "float32", name="X")],
                                    "void noop(float *X, int64_t n) {}"))(np_ones())
    root = tmp_path / "cache"
    for part in ("core", "wrapper"):
        shutil.copytree(tilejit_cache_dir / part, root / part, symlinks=True)
    return root


def np_ones():
    import numpy as np

    return np.ones(3, np.float32)


def _env(root: Path, **extra: str) -> dict:
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "TILEJIT_CACHE_DIR": str(root), "PYTHONPATH": os.pathsep.join(paths),
            **extra}


def compile_in_child(root: Path, *indices: int, **extra: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", CHILD, *map(str, indices)],
                          env=_env(root, **extra), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilejit", "cache", *args], env=_env(root),
                          capture_output=True, text=True, timeout=300, check=False)


def listed(root: Path) -> list[dict]:
    done = cli(root, "ls", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def kernels(root: Path) -> dict[str, dict]:
    return {e["name"]: e for e in listed(root) if e["kind"] == "kernel"}


def test_ls_size_and_path(cache):
    assert compile_in_child(cache, 2, 3) == ["2 [2.0, 2.0, 2.0]", "3 [3.0, 3.0, 3.0]"]
    entries = listed(cache)
    assert sorted(e["kind"] for e in entries) == ["core", "kernel", "kernel", "wrapper"]
    found = kernels(cache)
    assert sorted(found) == ["scale_2", "scale_3"]
    for e in entries:
        assert set(e) >= {"key", "kind", "name", "target", "size", "created", "last_used"}
        files = [p for p in Path(e["path"]).iterdir()]
        assert e["size"] == sum(p.lstat().st_size for p in files) > 0
        assert e["created"] <= e["last_used"] <= time.time() + 1
    assert found["scale_2"]["target"] == "cpu" and found["scale_2"]["arch"] == os.uname().machine
    assert {e["kind"]: e["name"] for e in entries if e["kind"] != "kernel"} == {
        "core": "tilejit core", "wrapper": "tilejit wrapper"}
    text = cli(cache, "ls").stdout.splitlines()
    assert len(text) == 4 and any(line.startswith(found["scale_3"]["key"]) for line in text)
    total = sum(e["size"] for e in entries)
    assert cli(cache, "size").stdout.startswith(f"{total} bytes (")
    assert "in 4 entries" in cli(cache, "size").stdout
    assert cli(cache, "path").stdout.strip() == str(cache)


def test_a_record_is_never_listed_as_used_before_it_was_created(cache):
    # The file system's clock is coarser than time.time(): a record's meta file can be
    # stamped a few milliseconds before the creation time written inside it.
    compile_in_child(cache, 5)
    entry = Path(kernels(cache)["scale_5"]["path"])
    meta_file = entry / "meta.json"
    stamp = meta_file.stat().st_mtime
    meta = json.loads(meta_file.read_text())
    meta["created"] = stamp + 0.004
    meta_file.write_text(json.dumps(meta))
    os.utime(meta_file, (stamp, stamp))
    e = kernels(cache)["scale_5"]
    assert e["created"] <= e["last_used"] == round(stamp, 3)


def test_last_used_is_the_last_load_by_a_process(cache):
    compile_in_child(cache, 4)
    before = kernels(cache)["scale_4"]
    time.sleep(1.1)
    compile_in_child(cache, 4)  # found in the cache and loaded, not written
    after = kernels(cache)["scale_4"]
    # Not written again (that would move `created` by the second slept). A first listing
    # may show `created` clamped a millisecond down to the meta file's coarser stamp
    # (test_a_record_is_never_listed_as_used_before_it_was_created); later ones do not.
    assert after["created"] == pytest.approx(before["created"], abs=0.01)
    assert after["last_used"] > before["last_used"]


def test_verify_lists_damaged_entries_and_fix_removes_them(cache):
    compile_in_child(cache, 5, 6, 7)
    found = kernels(cache)
    assert cli(cache, "verify").returncode == 0
    library = Path(found["scale_5"]["path"]) / "kernel.so"
    data = bytearray(library.read_bytes())
    data[100] ^= 0xFF
    library.write_bytes(bytes(data))
    (Path(found["scale_6"]["path"]) / "meta.json").unlink()
    done = cli(cache, "verify")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(found["scale_5"]["key"] in line and "SHA-256" in line for line in lines)
    assert sum("damaged:" in line for line in lines) == 2
    assert lines[-1] == "2 of 5 entries damaged"
    fixed = cli(cache, "verify", "--fix")
    assert fixed.returncode == 0 and "removed" in fixed.stdout
    assert sorted(kernels(cache)) == ["scale_7"]
    assert cli(cache, "verify").returncode == 0
    # A removed entry is built again by the next process that needs it.
    assert compile_in_child(cache, 5) == ["5 [5.0, 5.0, 5.0]"]


def _age(entry: dict, seconds: float) -> None:
    """Makes ``entry`` last used ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(Path(entry["path"]) / "meta.json", (then, then))


def test_prune_by_size_removes_least_recently_used_kernels_first(cache):
    compile_in_child(cache, 11, 12, 13)
    found = kernels(cache)
    for age, name in ((300, "scale_11"), (200, "scale_13"), (100, "scale_12")):
        _age(found[name], age)
    for e in listed(cache):
        if e["kind"] != "kernel":
            _age(e, 1000)  # older than every kernel, and still kept while kernels can go
    total = sum(e["size"] for e in listed(cache))
    done = cli(cache, "prune", "--max-size", str(total - found["scale_11"]["size"]
                                                   - found["scale_13"]["size"] // 2))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("removed 2 entries")
    assert sorted(kernels(cache)) == ["scale_12"]
    assert {e["kind"] for e in listed(cache)} == {"core", "wrapper", "kernel"}


def test_prune_by_age_and_bad_arguments(cache):
    compile_in_child(cache, 21, 22)
    _age(kernels(cache)["scale_21"], 3 * 3600)
    assert cli(cache, "prune", "--older-than", "2h").stdout.startswith("removed 1 entries")
    assert sorted(kernels(cache)) == ["scale_22"]
    assert cli(cache, "prune", "--older-than", "7d").stdout.startswith("removed 0 entries")
    for args, message in ((("--max-size", "lots"), "size 'lots': expected a number"),
                          (("--older-than", "1x"), "duration '1x': expected a number"),
                          ((), "give --max-size SIZE and/or --older-than DURATION")):
        done = cli(cache, "prune", *args)
        assert done.returncode == 2 and message in done.stderr


def test_sizes_and_durations_parse_as_documented():
    from tilejit.native._build import disk_cache

    assert [disk_cache.parse_size(s) for s in ("4096", "500M", "2G", "1.5k", "64KiB", "3 MB")] \
        == [4096, 500 << 20, 2 << 30, 1536, 64 << 10, 3 << 20]
    assert [disk_cache.parse_duration(s) for s in ("90", "30m", "12h", "7d", "2w", "45s")] \
        == [90, 1800, 43200, 604800, 1209600, 45]


def test_clear_removes_everything(cache):
    compile_in_child(cache, 31)
    done = cli(cache, "clear")
    assert done.returncode == 0 and done.stdout.startswith("removed 3 entries")
    assert listed(cache) == [] and "0 bytes" in cli(cache, "size").stdout


def test_the_size_bound_holds_with_several_processes_writing(cache):
    compile_in_child(cache, 40)
    one = kernels(cache)["scale_40"]["size"]
    base = sum(e["size"] for e in listed(cache))
    limit = base + 3 * one  # the core, the wrapper, scale_40 and three more kernels
    env = _env(cache, TILEJIT_CACHE_MAX_SIZE=str(limit))
    children = [subprocess.Popen([sys.executable, "-c", CHILD, *map(str, range(first,
                                                                                first + 4))],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for first in (41, 51, 61, 71)]
    for first, child in zip((41, 51, 61, 71), children):
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        assert out.splitlines() == [f"{i} {[float(i)] * 3}" for i in range(first, first + 4)]
    entries = listed(cache)
    assert sum(e["size"] for e in entries) <= limit
    assert {"core", "wrapper"} <= {e["kind"] for e in entries}
    assert cli(cache, "verify").returncode == 0


def test_prune_and_clear_while_another_process_calls_its_kernels(cache, monkeypatch):
    # The child keeps calling a kernel it loaded and keeps compiling new ones (cache writes
    # and, once their entries are gone, rebuilds) while this process clears and prunes.
    script = textwrap.dedent("""
        import sys, time, numpy as np, tilejit
        from tilejit import T
        n = T.symbol("n")
        def program(i):
            source = ("void twice_%d(const float *X, float *Y, int64_t n) {\\n"
                      "  for (int64_t j = 0; j < n; ++j) Y[j] = X[j] * 2 + %d;\\n}\\n" % (i, i))
            return tilejit.Program("twice_%d" % i, [
                T.Buffer((n,), "float32", name="X", const=True),
                T.Buffer((n,), "float32", name="Y")], source)
        first = tilejit.compile(program(0), out_idx=-1)
        print("ready", flush=True)
        x = np.ones(4, np.float32)
        end, i, calls = time.time() + 4, 0, 0
        while time.time() < end:
            assert first(x).tolist() == [2.0] * 4
            i = i % 3 + 1
            k = tilejit.compile(program(i), out_idx=-1)
            assert k(x).tolist() == [2.0 + i] * 4
            calls += 1
        print("calls", calls)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], env=_env(cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(cache))
    end, rounds = time.time() + 3, 0
    while time.time() < end:
        tcache.clear() if rounds % 2 else tcache.prune(max_size=1)
        rounds += 1
        time.sleep(0.05)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.startswith("calls ") and int(out.split()[1]) > 3 and rounds > 10


# --- Only tilejit's own entries are ever touched ------------------------------------------------

# Files a user keeps in a directory that TILEJIT_CACHE_DIR was set to by mistake, some of
# them where tilejit's entries would be, but not named as tilejit names them.
FOREIGN = ("notes.txt", "photos/2024/a.jpg", "photos/b.jpg", "kernels/readme.txt",
           "kernels/ab/abcdef/kernel.py", "kernels/ab/abcdef/data.bin",
           "kernels/zz/abcdef/kernel.so", "core/mine/libfoo.so", "wrapper/x/y/z/w.so",
           "bench/project/main.c", "prune.lock.bak")


def _plant_foreign(root: Path) -> dict[Path, bytes]:
    planted = {}
    for i, name in enumerate(FOREIGN):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"user data %d" % i)
        planted[path] = path.read_bytes()
    return planted


def _still_there(planted: dict[Path, bytes]) -> None:
    for path, data in planted.items():
        assert path.read_bytes() == data, path


def test_clear_prune_and_verify_leave_files_not_tilejits_alone(cache):
    planted = _plant_foreign(cache)
    compile_in_child(cache, 51, 52)
    assert sorted(kernels(cache)) == ["scale_51", "scale_52"]
    assert len(listed(cache)) == 4  # nothing of the user's is listed as an entry
    left = f"left alone: {len(FOREIGN)} files not tilejit's"
    done = cli(cache, "verify", "--fix")
    assert done.returncode == 0 and left in done.stdout, done.stdout
    done = cli(cache, "prune", "--max-size", "0")
    assert done.returncode == 0 and done.stdout.startswith("removed 4 entries"), done.stdout
    assert left in done.stdout
    _still_there(planted)
    compile_in_child(cache, 53)
    done = cli(cache, "clear")
    assert done.returncode == 0 and left in done.stdout and listed(cache) == []
    _still_there(planted)
    # The automatic bound prunes as `prune` does: the user's files stay.
    compile_in_child(cache, 54, 55, TILEJIT_CACHE_MAX_SIZE="1")
    _still_there(planted)


def test_garbage_meta_json_is_a_damaged_entry_never_a_traceback(cache):
    compile_in_child(cache, 61, 62, 63)
    found = kernels(cache)
    for name, meta in (("scale_61", {"name": 5, "target": None}), ("scale_62", [1, 2]),
                       ("scale_63", {"artifact": "../../../etc/passwd", "size": "big"})):
        path = Path(found[name]["path"]) / "meta.json"
        if isinstance(meta, dict):
            meta = {**json.loads(path.read_text()), **meta}
        path.write_text(json.dumps(meta))
    for args in (("ls",), ("ls", "--json"), ("size",), ("verify",)):
        done = cli(cache, *args)
        assert "Traceback" not in done.stderr and done.returncode in (0, 1), (args, done.stderr)
    damaged = {e["key"]: e["damaged"] for e in listed(cache) if e["damaged"]}
    assert len(damaged) == 3
    assert "name = 5" in damaged[found["scale_61"]["key"]]
    assert "target = null" in damaged[found["scale_61"]["key"]]
    assert "holds a list" in damaged[found["scale_62"]["key"]]
    assert sum("DAMAGED" in line for line in cli(cache, "ls").stdout.splitlines()) == 3
    done = cli(cache, "verify")
    assert done.returncode == 1 and done.stdout.splitlines()[-1] == "3 of 5 entries damaged"
    assert cli(cache, "verify", "--fix").returncode == 0
    assert kernels(cache) == {} and cli(cache, "verify").returncode == 0


def test_the_core_stays_an_entry_once_config_has_linked_it(cache):
    # `config` puts the libtilejit.so link C programs link against beside the cache's core:
    # the core stays one of tilejit's entries, listed, verified and cleared.
    done = subprocess.run([sys.executable, "-m", "tilejit", "config", "--libs"],
                          env=_env(cache), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    if str(cache) not in done.stdout:
        pytest.skip("an install's prebuilt core: config links no core of the cache")
    assert list(cache.glob("core/*/libtilejit.so"))
    assert "core" in [e["kind"] for e in listed(cache)]
    assert "not tilejit's" not in cli(cache, "size").stdout
    library = next(cache.glob("core/*/libtilejit_core-*.so"))
    library.write_bytes(library.read_bytes()[:-1])
    assert cli(cache, "verify").returncode == 1
    assert cli(cache, "clear").returncode == 0
    assert [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock"] == []


def test_output_into_a_closed_pipe_ends_the_command_quietly(cache):
    # `python -m tilejit cache ls | head -1`: the reader gone, the command ends as Unix
    # commands do (status 141: SIGPIPE), with no traceback.
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "tilejit", "cache", "ls"], env=_env(cache),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
                              check=False)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_cache_commands_refuse_a_cache_directory_that_is_a_file(tmp_path):
    root = tmp_path / "not-a-directory"
    root.write_text("a file where the cache directory should be")
    for command in (["ls"], ["size"], ["verify"], ["prune", "--max-size", "1M"], ["clear"]):
        done = cli(root, *command)
        assert (done.returncode, done.stdout) == (1, ""), (command, done.stdout)
        assert f"the cache directory {root} is not a directory" in done.stderr


def test_config_fails_when_the_cache_directory_cannot_be_used(tmp_path):
    root = tmp_path / "not-a-directory"
    root.write_text("a file where the cache directory should be")
    for option in ("--libdir", "--libs"):
        done = subprocess.run([sys.executable, "-m", "tilejit", "config", option],
                              env=_env(root), capture_output=True, text=True, timeout=300,
                              check=False)
        if done.returncode == 0:  # an install's prebuilt core needs no cache
            assert str(tmp_path) not in done.stdout and Path(done.stdout.split()[-1].removeprefix(
                "-Wl,-rpath,")).is_dir()
            continue
        assert done.returncode == 1 and done.stdout == ""
        assert f"cache directory {root}" in done.stderr, done.stderr
        assert "Set TILEJIT_CACHE_DIR to a writable directory" in done.stderr


# --- A cache others can write to -----------------------------------------------------------


def test_a_cache_others_can_write_to_is_warned_about_once(cache):
    cache.chmod(0o777)  # world-writable, no sticky bit
    done = subprocess.run([sys.executable, "-c", CHILD, "71", "72"], env=_env(cache),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("can be written by other users") == 1, done.stderr
    assert f"{cache} is writable by every user (mode drwxrwxrwx)" in done.stderr
    cache.chmod(0o1777)  # sticky: others cannot replace this user's entries
    (cache / "kernels").chmod(0o755)
    assert "other users" not in subprocess.run(
        [sys.executable, "-c", CHILD, "71"], env=_env(cache), capture_output=True, text=True,
        timeout=300, check=True).stderr
    if os.geteuid() == 0:  # another user's directory in it
        os.chown(cache / "kernels", 65534, 65534)
        done = subprocess.run([sys.executable, "-c", CHILD, "71"], env=_env(cache),
                              capture_output=True, text=True, timeout=300, check=True)
        assert f"{cache / 'kernels'} is owned by uid 65534, not by this user" in done.stderr
    cache.chmod(0o755)


AUTOTUNER = textwrap.dedent("""
    import hashlib, sys, tempfile, numpy as np, tilejit
    from pathlib import Path
    from tilejit import T
    from tilejit.native._build import disk_cache
    bound = disk_cache.parse_size(sys.argv[1])
    root = disk_cache.cache_root()
    n = T.symbol("n")
    made, x = [], np.ones(4, np.float32)
    for i in range(50):  # one variant per configuration tried
        source = ("void tune_%d(const float *X, float *Y, int64_t n) {\\n"
                  "  for (int64_t j = 0; j < n; ++j) Y[j] = X[j] + %d;\\n}\\n" % (i, i))
        k = tilejit.compile(tilejit.Program("tune_%d" % i, [
            T.Buffer((n,), "float32", name="X", const=True),
            T.Buffer((n,), "float32", name="Y")], source), out_idx=-1)
        assert k(x).tolist() == [1.0 + i] * 4
        made.append(k)
        kernels = [e for e in disk_cache.entries(root)
                   if e.path.relative_to(root).parts[0] == "kernels"]
        newest = max(kernels, key=lambda e: e.created)
        total = sum(e.size for e in kernels)
        assert total <= max(bound, newest.size), (i, total, bound)
        others = {e.path.relative_to(root).parts[0] for e in disk_cache.entries(root)}
        assert others <= {"kernels", "core", "wrapper"}, others
    # Every variant still runs, and exports the bytes it was verified with.
    gone = 0
    for i, k in enumerate(made):
        assert k(x).tolist() == [1.0 + i] * 4
        gone += not Path(k.library_path).exists()
    out = Path(tempfile.mkdtemp())
    for i in (0, 25, 49):
        k = made[i]
        directory = k.export(out / str(i))
        image = (directory / "kernel.so").read_bytes()
        assert hashlib.sha256(image).hexdigest() == k.artifact.digests[0]
        assert tilejit.load(directory)(x).tolist() == [1.0 + i] * 4
    print("evicted", gone)
""")


def test_the_bound_holds_for_an_autotuner_and_every_variant_keeps_working(cache):
    # One process compiling 50 variants under a bound of about two kernels: after each
    # compile the kernels in the cache fit the bound (the newest alone may exceed it);
    # every variant keeps running after its file is evicted, and exports the bytes it was
    # verified with.
    done = subprocess.run([sys.executable, "-c", AUTOTUNER, "40K"],
                          env=_env(cache, TILEJIT_CACHE_MAX_SIZE="40K"), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[1]) >= 45  # most variants' files are gone
    assert done.stderr.count("building the C core") <= 1, done.stderr
