"""Autotuned factories the autotune tests and their child processes share: ``make(...)``
returns a fresh ``@tilejit.autotune`` over a ``@tilejit.jit`` factory whose configs differ
in speed by known factors (``reps``: the kernel does its work ``reps`` times)."""

from __future__ import annotations

import numpy as np

import tilejit
from tilejit import T

SPIN = r"""
void spin(const float *A, float *B) {
  for (int r = 0; r < REPS; ++r) {
    for (int i = 0; i < N; ++i) {
      volatile float v = A[i] * 2.0f + (float)r * 0.0f;
      B[i] = v;
    }
  }
}
"""

# The fastest first in speed order: reps=1 is 4x faster than 4, 40x than 40.
CONFIGS = [{"reps": 40}, {"reps": 1}, {"reps": 4}]


def program(n: int, reps: int, name: str = "spin", extra: str = "") -> tilejit.Program:
    return tilejit.Program(
        name=name, source=f"#define N {n}\n#define REPS {reps}\n{extra}" + SPIN.replace(
            "spin", name),
        params=[T.Buffer((n,), "float32", name="A", const=True),
                T.Buffer((n,), "float32", name="B")])


def make(configs=None, name: str = "spin", extra: str = "", **options):
    """An autotuned ``spin(n)``; ``options`` go to ``tilejit.autotune``."""
    options.setdefault("warmup", 1)
    options.setdefault("rep", 5)
    options.setdefault("ref_prog", lambda a: a * 2)

    @tilejit.autotune(configs=CONFIGS if configs is None else configs, **options)
    @tilejit.jit(out_idx=-1)
    def spin(n, reps=4):
        return program(n, reps, name, extra)

    return spin


def check(kernel, n: int) -> None:
    a = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(kernel(a), a * 2)
