"""An eager JAX call against jnp (a benchmark, not a test): ``python tests/bench_jax_eager.py
[ROUNDS]``.

A tilejit vector add on two size-16 float32 JAX arrays, called eagerly, beside ``jnp.add``
on the same arrays, interleaved in one run: ``ROUNDS`` rounds (default 41) of 2000 calls
each, the median and the fastest round's time per call, and their ratios. docs/jax.md
says an eager call costs about what ``jnp.add`` does: this is the figure.
"""

from __future__ import annotations

import statistics
import sys
import timeit

import jax
import jax.numpy as jnp

import tilejit
from tilejit import T

SOURCE = """
void eager_add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""


def main(rounds: int = 41, calls: int = 2000) -> str:
    n = T.symbol("n")
    add = tilejit.compile(tilejit.Program("eager_add", [
        T.Buffer((n,), "float32", name="A", const=True),
        T.Buffer((n,), "float32", name="B", const=True),
        T.Buffer((n,), "float32", name="C")], SOURCE), out_idx=-1)
    x, y = jnp.arange(16, dtype=jnp.float32), jnp.ones(16, jnp.float32)
    for _ in range(500):  # both compiled and warm
        add(x, y).block_until_ready()
        jnp.add(x, y).block_until_ready()
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(timeit.timeit(lambda: add(x, y), number=calls) / calls * 1e6)
        theirs.append(timeit.timeit(lambda: jnp.add(x, y), number=calls) / calls * 1e6)
    mine, jnps = statistics.median(ours), statistics.median(theirs)
    return (f"jax {jax.__version__} ({jax.default_backend()}), {rounds} rounds of {calls} "
            f"calls: tilejit eager median {mine:.2f} us (fastest {min(ours):.2f}), jnp.add "
            f"median {jnps:.2f} us (fastest {min(theirs):.2f}); ratio {mine / jnps:.2f} "
            f"(fastest: {min(ours) / min(theirs):.2f})")


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 41))
