"""tilejit where torch is not installed (a JAX or NumPy user's machine): the demo runs its
kernels on NumPy arrays (and JAX arrays, with JAX) and says torch is absent, and doctor
reports no fast path of torch's. Here torch is hidden from a child process
(``sys.modules["torch"] = None``: its import fails, ``find_spec`` finds nothing); CI also
runs the demo and the JAX tests in a venv that never had torch (``.ci/run``)."""

from __future__ import annotations

import importlib.util
import json

from conftest import run_python

_WITHOUT_TORCH = """
import runpy, sys
sys.modules["torch"] = None  # as if torch were not installed
sys.argv = ["tilejit", *{argv!r}]
try:
    runpy.run_module("tilejit", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
assert sys.modules["torch"] is None, "something imported torch"
"""


def _tilejit_without_torch(*argv: str) -> str:
    return run_python("-c", _WITHOUT_TORCH.format(argv=list(argv)))


def test_the_demo_runs_on_numpy_and_says_torch_is_absent():
    out = _tilejit_without_torch("demo")
    assert "torch is not installed: the kernels run on NumPy arrays" in out
    assert "all kernels match NumPy" in out and "MISMATCH" not in out
    if importlib.util.find_spec("jax") is not None:
        assert "all kernels match jax.numpy" in out
    for kernel in ("vec_add", "matmul", "row_stats (max, sum)"):
        assert f"\n{kernel} " in out


def test_doctor_lists_no_fast_path_of_torch():
    info = json.loads(_tilejit_without_torch("doctor", "--json"))
    assert info["packages"]["torch"] is None  # "not installed": it cannot be imported
    torch_words = ("Dynamo", "Inductor", "autograd", "forward-AD", "lazy-view", "torch")
    assert [name for name in info["fast_paths"] if any(w in name for w in torch_words)] == []
    assert info["torch_ops"] is None and info["torch_range"] is None
