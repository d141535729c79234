"""The fast paths and their switch: ``TILEJIT_FAST_PATHS=0`` turns off everything tilejit
reads of other projects' internals, and the behaviour suites pass again on the public
fallbacks alone; ``python -m tilejit doctor`` says which are active and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import Background, subprocess_env

ROOT = Path(__file__).resolve().parent.parent

# The suites whose behaviour every fast path touches: claims and autograd (libc10's
# requires_grad, forward-AD's level), torch.compile (Dynamo's inline and constant
# attributes), lazy views (TensorImpl's key set), the call itself (vectorcall), keywords,
# validation, layouts and the exchange API.
BEHAVIOUR = ["test_torch_autograd.py", "test_torch_op.py", "test_torch_native.py",
             "test_torch_record.py",
             "test_torch_versions.py", "test_call.py",
             "test_validation.py", "test_exchange.py", "test_layout.py", "test_jit.py",
             "test_backends.py"]

FAST_PATHS = {"autograd claim (libc10)", "forward-AD level", "lazy-view bits (TensorImpl)",
              "vectorcall (CPython type flags)", "Dynamo inline (_torchdynamo_inline)",
              "Dynamo constant (_dynamo_marked_constant)",
              "torch op autograd kernel in C (plain calls)",
              "exact ints read in place (PyLongObject)",
              "autograd.Function C apply (_FunctionBase.apply)",
              "Inductor lowering (the kernel called without the dispatcher)"}


# Those of a torch without the DLPack exchange API (2.9), whose tensors a call would read
# through __dlpack__: decided only there.
WITHOUT_EXCHANGE_API = {"tensors read in place (TensorImpl, torch without the exchange API)",
                        "outputs made in C (THPVariable_Wrap, torch without the exchange API)"}


def test_doctor_reports_every_fast_path(child_python):
    torch = pytest.importorskip("torch", reason="half of the fast paths are torch's")
    exchange = any(hasattr(torch.Tensor, name) for name in
                   ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"))
    expected = FAST_PATHS if exchange else FAST_PATHS | WITHOUT_EXCHANGE_API
    on = json.loads(child_python("-m", "tilejit", "doctor", "--json"))
    assert on["fast_paths_switch"] == "on"
    assert set(on["fast_paths"]) >= expected
    # A torch with the exchange API never reads its tensors another way.
    assert not exchange or not set(on["fast_paths"]) & WITHOUT_EXCHANGE_API
    # This machine's torch is one the probes know: every fast path checks out.
    assert all(on["fast_paths"][name]["active"] for name in expected), on["fast_paths"]
    assert on["packages"]["torch"].startswith("2.")
    assert on["builds"]["core"]["built"] and on["builds"]["wrapper"]["built"]
    off = json.loads(child_python("-m", "tilejit", "doctor", "--json", TILEJIT_FAST_PATHS="0"))
    assert off["fast_paths_switch"].startswith("off")
    for name in expected:
        assert not off["fast_paths"][name]["active"]
        assert "TILEJIT_FAST_PATHS=0" in off["fast_paths"][name]["why"]


def test_doctor_prints_one_screen(child_python):
    out = child_python("-m", "tilejit", "doctor")
    for heading in ("packages", "compilers", "builds for", "cuda", "fast paths: on"):
        assert heading in out
    assert len(out.splitlines()) < 60


def _behaviour_suites_without_fast_paths(work: Path):
    tests = [str(ROOT / "tests" / name) for name in BEHAVIOUR]
    return ([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p",
             "no:cacheprovider", *tests], subprocess_env(TILEJIT_FAST_PATHS="0"), ROOT)


FAST_PATHS_OFF = Background(_behaviour_suites_without_fast_paths, timeout=1200)


@pytest.mark.slow
@pytest.mark.background(FAST_PATHS_OFF)
def test_the_behaviour_suites_pass_with_every_fast_path_off():
    done = FAST_PATHS_OFF.result()
    tail = "\n".join(done.stdout.splitlines()[-30:])
    assert done.returncode == 0, tail + done.stderr[-3000:]
    assert " passed" in tail and "failed" not in tail


def test_doctor_says_what_it_built_to_find_out(tilejit_cache_dir, tmp_path, child_python):
    """In an empty cache, doctor builds the core and the wrapper (to check CUDA and the
    fast paths) and says so, rather than reporting them as not built; a second run finds
    them."""
    root = tmp_path / "cache"
    first = json.loads(child_python("-m", "tilejit", "doctor", "--json",
                                    TILEJIT_CACHE_DIR=str(root)))
    again = child_python("-m", "tilejit", "doctor", TILEJIT_CACHE_DIR=str(root))
    for name in ("core", "wrapper"):
        b = first["builds"][name]
        assert b["built"] and Path(b["path"]).is_file(), b
        if not b["prebuilt"]:  # a checkout: built into the empty cache, by doctor
            assert b["built_now"] and Path(b["path"]).is_relative_to(root), b
    assert "not built yet" not in again and "built just now" not in again
    assert "[built, in the cache]" in again or "[prebuilt, from the install]" in again
