"""Memory: many calls leak neither memory nor references.

RSS comes from /proc/self/statm after a warm-up, with a gc.collect() before each reading;
the inputs' reference counts must be exactly what they were before the calls.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from kernels import VEC_ADD

from tilejit import T

# Hundreds of thousands of calls per test: left out by `pytest -m "not slow"`
# (CONTRIBUTING.md).
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                 reason="RSS is read from /proc/self/statm")]


# Allowed RSS growth over the measured calls.
MAX_GROWTH = 1 << 20
WARMUP = 10_000


def _rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as handle:
        resident_pages = int(handle.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _measure(call, count):
    """Runs `call` WARMUP times, then two windows of `count` calls; returns the smaller RSS
    growth of the two windows.

    A leak grows RSS in every window by the same amount. The allocator may also grow once,
    late (a heap that the earlier tests of a long session left fragmented takes a while to
    settle), which one window alone cannot tell from a leak: the smaller of two catches
    every leak of more than MAX_GROWTH / count bytes per call and ignores that.
    """
    for _ in range(WARMUP):
        call()
    growths = []
    for _ in range(2):
        before = _rss()
        for _ in range(count):
            call()
        growths.append(_rss() - before)
    return min(growths)


@pytest.mark.parametrize(("framework", "count"), [("torch", 100_000), ("numpy", 100_000)])
def test_calls_with_an_allocated_output_do_not_leak(vec_add, framework, count):
    if framework == "torch":
        a, b = torch.rand(64), torch.rand(64)
    else:
        a, b = np.random.rand(64).astype(np.float32), np.random.rand(64).astype(np.float32)
    want = a + b
    refs = (sys.getrefcount(a), sys.getrefcount(b))
    out = vec_add(a, b)
    assert (out == want).all()
    del out

    growth = _measure(lambda: vec_add(a, b), count)

    assert growth < MAX_GROWTH, f"RSS grew by {growth} bytes over {count} calls"
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs


def test_calls_without_outputs_do_not_leak(build):
    n = T.symbol("n")
    k = build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                          T.Buffer((n,), "float32", name="B", const=True),
                          T.Buffer((n,), "float32", name="C")], VEC_ADD)
    a, b, c = torch.rand(16), torch.rand(16), torch.empty(16)
    an, bn, cn = a.numpy(), b.numpy(), c.numpy()
    tensors = (a, b, c, an, bn, cn)
    refs = [sys.getrefcount(t) for t in tensors]

    def call():
        k(a, b, c)
        k(an, bn, cn)

    growth = _measure(call, 50_000)

    assert growth < MAX_GROWTH, f"RSS grew by {growth} bytes"
    assert [sys.getrefcount(t) for t in tensors] == refs


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_failing_calls_do_not_leak(vec_add, framework):
    if framework == "torch":
        a, bad = torch.rand(64), torch.rand(63)
    else:
        a, bad = np.zeros(64, np.float32), np.zeros(63, np.float32)
    refs = (sys.getrefcount(a), sys.getrefcount(bad))
    messages = set()

    def call():
        try:
            vec_add(a, bad)
        except ValueError as exc:
            messages.add(str(exc))
        else:
            raise AssertionError("the bad call did not raise")

    growth = _measure(call, 20_000)

    assert messages == {("vec_add: argument 1 'B': expected shape[0] == n (= 64, bound by "
                         "argument 0 'A'), got 63")}
    assert growth < MAX_GROWTH, f"RSS grew by {growth} bytes over 20000 failing calls"
    assert (sys.getrefcount(a), sys.getrefcount(bad)) == refs


def test_type_errors_do_not_leak(vec_add):
    a = torch.rand(8)
    refs = sys.getrefcount(a)

    def call():
        try:
            vec_add(a, "not a tensor")
        except TypeError:
            pass

    growth = _measure(call, 20_000)
    assert growth < MAX_GROWTH
    assert sys.getrefcount(a) == refs
