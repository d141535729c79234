"""``python -m tilejit demo``: compile three CPU kernels, run them on torch tensors, check them.

Each row: the kernel, the shape it ran on, the max error against torch, the compile
time (cold or from the disk cache, as it happened) and the median per-call time.
"""

from __future__ import annotations

import statistics
import time

from . import Program, T, compile

VEC_ADD = r"""
void vec_add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""

MATMUL = r"""
/* C[M, N] = A[M, K] @ B[K, N]; K and N are fixed, M is dynamic. */
void matmul(const float *A, const float *B, float *C, int64_t M) {
  for (int64_t i = 0; i < M; ++i) {
    float *c = C + i * 64;
    for (int j = 0; j < 64; ++j) c[j] = 0.0f;
    for (int k = 0; k < 128; ++k) {
      float a = A[i * 128 + k];
      const float *b = B + k * 64;
      for (int j = 0; j < 64; ++j) c[j] += a * b[j];
    }
  }
}
"""

ROW_STATS = r"""
/* Per row of X[rows, cols]: its maximum and its sum. X may be strided by row. */
void row_stats(const float *X, float *MAX, float *SUM, int64_t rows, int64_t cols,
               int64_t row_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = X + r * row_stride;
    float m = x[0], s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      m = x[c] > m ? x[c] : m;
      s += x[c];
    }
    MAX[r] = m;
    SUM[r] = s;
  }
}
"""


def programs():
    """The demo programs, with their out_idx."""
    n = T.symbol("n")
    m = T.symbol("M")
    rows, cols, rs = T.symbol("rows"), T.symbol("cols"), T.symbol("row_stride")
    return [
        (Program("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                             T.Buffer((n,), "float32", name="B", const=True),
                             T.Buffer((n,), "float32", name="C")], VEC_ADD), -1),
        (Program("matmul", [T.Buffer((m, 128), "float32", name="A", const=True),
                            T.Buffer((128, 64), "float32", name="B", const=True),
                            T.Buffer((m, 64), "float32", name="C")], MATMUL), -1),
        (Program("row_stats", [T.Buffer((rows, cols), "float32", strides=(rs, 1), name="X",
                                        const=True),
                               T.Buffer((rows,), "float32", name="MAX"),
                               T.Buffer((rows,), "float32", name="SUM")], ROW_STATS), [1, 2]),
    ]


def _per_call_us(fn, *args, calls=2000, repeats=5):
    fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def run(print_fn=print) -> bool:
    """Runs the demo; returns True when every kernel matches torch."""
    import torch

    torch.manual_seed(0)
    (vec_prog, vec_out), (mm_prog, mm_out), (rs_prog, rs_out) = programs()
    rows = []

    def build(prog, out):
        start = time.perf_counter()
        kernel = compile(prog, out_idx=out, target="cpu")
        return kernel, (time.perf_counter() - start) * 1e3

    vec_add, t_vec = build(vec_prog, vec_out)
    for size in (1000, 1 << 20):
        a, b = torch.rand(size), torch.rand(size)
        err = (vec_add(a, b) - (a + b)).abs().max().item()
        rows.append(("vec_add", f"({size},)", err, t_vec, _per_call_us(vec_add, a, b)))

    matmul, t_mm = build(mm_prog, mm_out)
    for m in (1, 257):
        a, b = torch.randn(m, 128), torch.randn(128, 64)
        err = (matmul(a, b) - a @ b).abs().max().item()
        rows.append(("matmul", f"({m}, 128) @ (128, 64)", err, t_mm,
                     _per_call_us(matmul, a, b, calls=200)))

    row_stats, t_rs = build(rs_prog, rs_out)
    x = torch.randn(300, 100)[:, :77]  # a strided view: rows 100 apart
    mx, sm = row_stats(x)
    err = max((mx - x.amax(dim=1)).abs().max().item(), (sm - x.sum(dim=1)).abs().max().item())
    rows.append(("row_stats (max, sum)", "(300, 77) strided", err, t_rs,
                 _per_call_us(row_stats, x, calls=500)))

    ok = all(err < 1e-3 for _, _, err, _, _ in rows)
    header = ("kernel", "shape", "max error", "compile ms", "per call us")
    table = [header] + [(k, s, f"{e:.2e}", f"{c:.1f}", f"{p:.2f}") for k, s, e, c, p in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print_fn("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
        if i == 0:
            print_fn("  ".join("-" * w for w in widths))
    print_fn("all kernels match torch" if ok else "MISMATCH against torch")
    return ok
