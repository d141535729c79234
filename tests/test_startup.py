"""A fresh process's way to its first kernel call: what it imports and what it finds again.

The times themselves are a benchmark (``python -m tilejit bench --startup``); these tests
hold what makes them small: ``import tilejit`` imports no framework and nothing it does not
need, a first call on torch tensors loads nothing of ``torch.compile`` (no
``torch._dynamo``, no Inductor, no sympy), and what torch's claim probes once per torch
build is kept on disk and checked, not searched for again.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_python

torch = pytest.importorskip("torch")

from tilejit.frameworks.torch import probes


def _child(name: str, expression: str) -> str:
    """The start of a child's code: torch and tilejit imported, ``kernel`` the elementwise
    kernel ``Y[i] = <expression of X[i]>`` called ``name``, with ``Y`` allocated."""
    return rf"""
import json, sys
import torch
import tilejit
from tilejit import T
n = T.symbol("n")
kernel = tilejit.compile(tilejit.Program(
    name="{name}", params=[T.Buffer((n,), "float32", name="X", const=True),
                           T.Buffer((n,), "float32", name="Y")],
    source="void {name}(const float *X, float *Y, int64_t n) {{"
           " for (int64_t i = 0; i < n; ++i) Y[i] = {expression}; }}"), out_idx=-1)
"""


_FIRST_CALL = _child("startup_neg", "-X[i]") + r"""
x = torch.arange(4.0)
assert kernel(x).tolist() == [-0.0, -1.0, -2.0, -3.0]
leaf = torch.ones(3, requires_grad=True)
with torch.no_grad():  # asked of libc10 through the probe's finding, not claimed
    assert kernel(leaf).tolist() == [-1.0] * 3
assert kernel(leaf.detach()).tolist() == [-1.0] * 3
from tilejit.runtime import fast_paths
print(json.dumps({
    "loaded": sorted(m for m in sys.modules if m.startswith(
        ("torch._dynamo", "torch._inductor", "sympy", "Cython"))),
    "jvp_decompositions": "torch._decomp.decompositions_for_jvp" in sys.modules,
    "claim": fast_paths.state().get("autograd claim (libc10)"),
}))
"""


def test_a_first_call_on_torch_loads_nothing_of_torch_compile(tmp_path):
    """Twice in fresh processes sharing a cache: neither loads torch._dynamo, Inductor or
    sympy for a call, and the second does not make a forward-mode dual (a third of a
    second: the probe's finding is kept)."""
    env = {"TILEJIT_CACHE_DIR": str(tmp_path / "cache")}
    first = json.loads(run_python("-c", _FIRST_CALL, **env).splitlines()[-1])
    again = json.loads(run_python("-c", _FIRST_CALL, **env).splitlines()[-1])
    for seen in (first, again):
        # (The first process also builds the wrapper into the empty cache: Cython.)
        assert [m for m in seen["loaded"] if not m.startswith("Cython")] == [], seen
        assert seen["claim"][0] is True, seen  # the fast path is on, checked
    assert again["loaded"] == []
    assert first["jvp_decompositions"] and not again["jvp_decompositions"]
    listed = run_python("-m", "tilejit", "cache", "ls", "--kind", "probe", "--json", **env)
    assert [e["name"] for e in json.loads(listed)] == ["autograd record (TensorImpl)"]


def test_import_tilejit_imports_no_framework_and_no_tuner():
    out = run_python("-c", "import sys, tilejit; print(sorted(m for m in sys.modules if "
                           "m.split('.')[0] in ('torch', 'jax', 'numpy', 'Cython') or m in "
                           "('importlib.metadata', 'tilejit.runtime.autotune')))")
    assert out.strip() == "[]"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEJIT_DISABLE_CACHE", raising=False)
    return tmp_path / "cache"


def _counting(value):
    calls = []

    def find():
        calls.append(1)
        return value

    return find, calls


def test_a_kept_finding_is_found_once_and_checked_each_time(cache):
    find, calls = _counting({"offset": 8})
    checked = []

    def holds(value):
        checked.append(value)
        return True

    assert probes.kept("probe a", "build 1", find, holds) == {"offset": 8}
    assert probes.kept("probe a", "build 1", find, holds) == {"offset": 8}
    assert calls == [1] and checked == [{"offset": 8}]  # found once; the kept one checked
    assert probes.kept("probe a", "build 2", find, holds) == {"offset": 8}
    assert calls == [1, 1]  # another build: found again
    assert len(list((cache / "probes").glob("*/probe.json"))) == 2


def test_a_kept_finding_that_does_not_hold_is_found_again(cache):
    find, calls = _counting(16)
    probes.kept("probe b", "build", find, lambda v: True)
    assert probes.kept("probe b", "build", find, lambda v: False) == 16
    assert calls == [1, 1]
    assert probes.kept("probe b", "build", find, lambda v: v == 16) == 16
    assert calls == [1, 1]  # kept anew


def test_a_damaged_kept_finding_is_found_again(cache):
    find, calls = _counting(24)
    probes.kept("probe c", "build", find, lambda v: True)
    (kept,) = (cache / "probes").glob("*/probe.json")
    kept.write_text("0")  # its meta.json's sha256 no longer matches
    assert probes.kept("probe c", "build", find, lambda v: True) == 24
    assert calls == [1, 1]
    assert json.loads(kept.read_text()) == 24


def test_a_failed_search_is_not_kept(cache):
    def find():
        raise LookupError("not on this torch")

    for _ in range(2):
        with pytest.raises(LookupError, match="not on this torch"):
            probes.kept("probe d", "build", find, lambda v: True)
    assert not list((cache / "probes").glob("*/probe.json"))


def test_without_a_cache_the_finding_is_made_every_time(cache, monkeypatch):
    monkeypatch.setenv("TILEJIT_DISABLE_CACHE", "1")
    find, calls = _counting(8)
    for _ in range(2):
        assert probes.kept("probe e", "build", find, lambda v: True) == 8
    assert calls == [1, 1] and not cache.exists()


def test_the_kept_autograd_record_offset_is_checked_against_this_torch(cache, monkeypatch):
    """The offset torch's claim reads: searched with forward-mode duals once, kept; a kept
    offset that does not tell tensors with an autograd record from those without (one
    tampered with, or another torch's) is searched for again."""
    searched = []
    real = probes._meta_candidates

    def candidates(torch_, tangents):
        searched.append(tangents)
        return real(torch_, tangents)

    monkeypatch.setattr(probes, "_meta_candidates", candidates)
    offset = probes._autograd_meta_offset(torch)
    assert offset > 0 and searched == [True]
    assert probes._autograd_meta_offset(torch) == offset and searched == [True, False]
    (kept,) = (cache / "probes").glob("*/probe.json")
    meta = json.loads((kept.parent / "meta.json").read_text())
    import hashlib

    kept.write_text("0")  # the TensorImpl's first word: never the autograd record
    meta.update(size=1, sha256=hashlib.sha256(b"0").hexdigest())
    (kept.parent / "meta.json").write_text(json.dumps(meta))
    searched.clear()
    assert probes._autograd_meta_offset(torch) == offset
    assert searched == [False, True]  # checked, refused, searched again
    assert json.loads(kept.read_text()) == offset


_FIRST_OP = _child("startup_scale", "3 * X[i]") + r"""
kernel.register_autograd(lambda ctx, grad: 3 * grad)  # defines the op: its probes run
x = torch.ones(4, requires_grad=True)
kernel(x).sum().backward()  # claimed: recorded by autograd through the op
assert x.grad.tolist() == [3.0] * 4
assert kernel.torch_op(x.detach()).tolist() == [3.0] * 4
print(json.dumps(sorted(m for m in sys.modules if m.startswith(
    ("torch._dynamo", "torch._inductor", "sympy")))))
"""


def test_a_kernels_torch_op_and_autograd_load_nothing_of_torch_compile():
    """Defining a kernel's op (its C autograd kernel's probes included) and a recorded
    call load neither torch._dynamo nor Inductor nor sympy: seconds of imports for what
    only torch.compile needs."""
    assert json.loads(run_python("-c", _FIRST_OP).splitlines()[-1]) == []
