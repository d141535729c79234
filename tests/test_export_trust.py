"""Artifacts you can trust: a loaded kernel is what the core read and checked when it
opened the export, whatever the path holds later, and an export vouches only for what
was built. Each test makes the situation with real files and processes: an export
replaced in this process and by another one, a cache file replaced after it was loaded,
MANIFEST and signature.tj spelled as only the core's reader accepts, a FIFO, a link,
bytes that are not UTF-8."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO_ROOT
from test_export import _rehash, prebuilt_scale

import tilejit
from tilejit import T
from tilejit.native._build import build_tools


def _add():
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program("addk", [
        T.Buffer((n,), "float32", name="X", const=True),
        T.Buffer((n,), "float32", name="Y", const=True),
        T.Buffer((n,), "float32", name="Z"),
    ], "void addk(const float *X, const float *Y, float *Z, int64_t n) {\n"
       "  for (int64_t i = 0; i < n; ++i) Z[i] = X[i] + Y[i];\n}\n"), out_idx=2)


def _scale(tag: str = ""):
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program("scalek", [
        T.Buffer((n,), "float32", name="X", const=True),
        T.Scalar("float32", name="alpha"),
        T.Buffer((n,), "float32", name="Z"),
    ], f"/* {tag} */\nvoid scalek(const float *X, float alpha, float *Z, int64_t n) {{\n"
       "  for (int64_t i = 0; i < n; ++i) Z[i] = alpha * X[i];\n}\n"), out_idx=2)


X = torch.arange(5, dtype=torch.float32)


def _check(kernel) -> None:
    """The kernel computes what its own signature says."""
    if kernel.name == "addk":
        assert kernel(X, X + 1).tolist() == (2 * X + 1).tolist()
    else:
        assert kernel.name == "scalek"
        assert kernel(X, 2.5).tolist() == (2.5 * X).tolist()


@pytest.fixture(scope="module")
def kernels(tilejit_cache_dir):
    return _add(), _scale()


def test_a_path_exported_again_loads_the_new_kernel(kernels, tmp_path):
    add, scale = kernels
    path = tmp_path / "k"
    add.export(path)
    first = tilejit.load(path)
    _check(first)
    scale.export(path, overwrite=True)
    second = tilejit.load(path)
    assert second.name == "scalek"
    _check(second)
    _check(first)  # still the library it loaded


@pytest.mark.parametrize("backend", ["cython", "dlpack", "ctypes"])
def test_a_loaded_kernel_stays_what_it_loaded(kernels, tmp_path, backend):
    add, scale = kernels
    path = tmp_path / "k"
    add.export(path)
    loaded = tilejit.load(path)
    scale.export(path, overwrite=True)
    other = loaded.with_backend(backend)  # not the kernel now at the path
    assert other.name == "addk"
    _check(other)
    copy = loaded.export(tmp_path / "copy")  # the bytes it loaded, not kernel.so at the path
    again = tilejit.load(copy)
    assert again.name == "addk"
    _check(again)
    shutil.rmtree(path)
    _check(loaded.with_backend(backend))  # nothing is read from the directory


WRITER = """
import sys, time, tilejit
kernels = [tilejit.load(sys.argv[1]), tilejit.load(sys.argv[2])]
print("ready", flush=True)
end, i = time.monotonic() + float(sys.argv[4]), 0
while time.monotonic() < end:
    kernels[i % 2].export(sys.argv[3], overwrite=True)
    i += 1
print(i, flush=True)
"""


def test_a_load_while_another_process_exports_gets_one_whole_kernel(kernels, tmp_path):
    add, scale = kernels
    sources = [add.export(tmp_path / "add"), scale.export(tmp_path / "scale")]
    target = tmp_path / "k"
    add.export(target)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, sources), str(target),
                               "3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    loads, names, refusals = 0, set(), []
    try:
        assert writer.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 120
        while writer.poll() is None and time.monotonic() < deadline:
            try:
                kernel = tilejit.load(target)
            except ValueError as exc:  # the one refusal documented for this: try again
                assert "was replaced while it was read" in str(exc) and "try again" in str(exc)
                refusals.append(str(exc))
                continue
            _check(kernel)
            names.add(kernel.name)
            loads += 1
    finally:
        writer.kill()
        stdout, stderr = writer.communicate()
    assert writer.returncode == 0, stderr
    assert int(stdout) > 2  # the path was replaced while this process loaded it
    assert loads > 0 and len(refusals) <= loads, (loads, refusals[:3])


def test_export_refuses_a_library_replaced_after_it_was_loaded(tilejit_cache_dir, tmp_path):
    kernel = _scale(tag=f"replaced {os.getpid()} {time.time()}")
    other = _add()
    library = Path(kernel.library_path)
    # Another library moved to the cached path (the loaded one stays mapped, untouched).
    shutil.copyfile(other.library_path, tmp_path / "other.so")
    os.replace(tmp_path / "other.so", library)
    with pytest.raises(ValueError, match=(
            rf"scalek: cannot export: {re.escape(str(library))} is not the library the kernel "
            r"was built and loaded from \(SHA-256 [0-9a-f]{64}\); it was changed or replaced")):
        kernel.export(tmp_path / "k")
    assert not (tmp_path / "k").exists()


@pytest.fixture
def exported(kernels, tmp_path):
    return kernels[1].export(tmp_path / "k")


def test_tabs_and_leading_blanks_read_as_the_core_reads_them(exported):
    _rehash(exported, "signature.tj")
    signature = (exported / "signature.tj").read_text().splitlines()
    (exported / "signature.tj").write_text("\n".join(
        [signature[0]] + ["\t " + line.replace(" ", "\t") for line in signature[1:]]) + "\n")
    _rehash(exported, "signature.tj")
    manifest = (exported / "MANIFEST").read_text().splitlines()
    (exported / "MANIFEST").write_text("\n".join(
        [manifest[0]] + ["  \t" + line.replace(" ", " \t") for line in manifest[1:]]) + "\n")
    loaded = tilejit.load(exported)
    _check(loaded)
    # A text field is the rest of its line, as written.
    prototype = "void scalek(const float *X, float alpha, float *Z, int64_t n)"
    assert loaded.c_prototype == prototype.replace(" ", "\t")


def test_a_malformed_manifest_line_is_refused_by_file_and_line(exported):
    text = (exported / "MANIFEST").read_text()
    (exported / "MANIFEST").write_text(text.replace("file kernel.h ", "file\tkernel.h\t\t1 "))
    with pytest.raises(ValueError, match=r"tilejit export .*: MANIFEST: line \d+: expected "
                                         r"'file <name> <size> <sha256>'"):
        tilejit.load(exported)


def test_a_fifo_in_place_of_a_listed_file_is_refused(exported):
    (exported / "kernel.h").unlink()
    os.mkfifo(exported / "kernel.h")
    with pytest.raises(ValueError, match=r"kernel.h: cannot read it \(it is not a regular file"):
        tilejit.load(exported)


def test_a_link_in_place_of_a_listed_file_is_refused(exported, tmp_path):
    outside = tmp_path / "outside.so"
    os.rename(exported / "kernel.so", outside)
    os.symlink(outside, exported / "kernel.so")
    with pytest.raises(ValueError, match=r"kernel.so: cannot read it \(it is a symbolic link"):
        tilejit.load(exported)


def test_bytes_that_are_not_utf8_only_in_comments(exported):
    data = (exported / "signature.tj").read_bytes()
    (exported / "signature.tj").write_bytes(data.replace(b"\nkernel ", b"\n# caf\xe9\nkernel "))
    _rehash(exported, "signature.tj")
    _check(tilejit.load(exported))
    data = (exported / "signature.tj").read_bytes()
    line = data[:data.index(b"\nfunction ")].count(b"\n") + 2
    (exported / "signature.tj").write_bytes(data.replace(b"float alpha", b"float \xe9lpha"))
    _rehash(exported, "signature.tj")
    with pytest.raises(ValueError, match=(
            rf"tilejit export {re.escape(str(exported))}: signature.tj: line {line}: byte 0xe9 "
            r"at column \d+ is not UTF-8")):
        tilejit.load(exported)



def test_a_loaded_prebuilt_library_exports_the_bytes_it_loaded(tilejit_cache_dir, tmp_path):
    built, _ = prebuilt_scale(tmp_path)
    path = built.export(tmp_path / "k")
    loaded = tilejit.load(path)
    other = tilejit.load(_add().export(tmp_path / "add"))
    other.export(path, overwrite=True)  # another kernel at the path
    copy = tilejit.load(loaded.export(tmp_path / "copy"))
    assert sorted(os.listdir(tmp_path / "copy")) == sorted(
        ["MANIFEST", "glue.so", "kernel.h", "kernel.so", "signature.tj", "torch_op.so",
         "torch_op.txt", build_tools.core_library_path().name])
    for kernel in (copy, loaded.with_backend("ctypes")):
        x = torch.ones(4)
        kernel(x)
        assert x.tolist() == [3.0] * 4
