"""``python -m tilejit demo [--target cuda] [--tilelang]``: compile three kernels, run them
on torch tensors (on NumPy arrays where torch is not installed; on JAX arrays too where JAX
is), check them (``--tilelang``: TileLang kernels, through tilejit).

Each row: the kernel, the shape it ran on, the max error against the framework's own
result, the compile time (cold or from the disk cache, as it happened; the framework's
import is timed on its own line) and the median per-call time (for CUDA, including the
wait for the GPU to finish).
"""

from __future__ import annotations

import importlib.util
import statistics
import time

from .. import Program, T, compile
from ..runtime.backends import resolve as resolve_backend
from .tilelang_defs import tilelang_kernels

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


def _signatures():
    """The demo kernels' parameters and out_idx, shared by the C and CUDA versions, with the
    symbols their launch shapes use."""
    n, m = T.symbol("n"), T.symbol("M")
    rows, cols, rs = T.symbol("rows"), T.symbol("cols"), T.symbol("row_stride")
    params = {
        "vec_add": [T.Buffer((n,), "float32", name="A", const=True),
                    T.Buffer((n,), "float32", name="B", const=True),
                    T.Buffer((n,), "float32", name="C")],
        "matmul": [T.Buffer((m, 128), "float32", name="A", const=True),
                   T.Buffer((128, 64), "float32", name="B", const=True),
                   T.Buffer((m, 64), "float32", name="C")],
        "row_stats": [T.Buffer((rows, cols), "float32", strides=(rs, 1), name="X", const=True),
                      T.Buffer((rows,), "float32", name="MAX"),
                      T.Buffer((rows,), "float32", name="SUM")],
    }
    out_idx = {"vec_add": -1, "matmul": -1, "row_stats": [1, 2]}
    return params, out_idx, (n, m, rows)


def programs():
    """The demo programs, with their out_idx."""
    params, out_idx, _ = _signatures()
    sources = {"vec_add": VEC_ADD, "matmul": MATMUL, "row_stats": ROW_STATS}
    return [(Program(name, params[name], sources[name]), out_idx[name]) for name in sources]


def _per_call_us(fn, *args, calls=2000, repeats=5):
    fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def _framework(print_fn):
    """torch, imported (and its tilejit adapter loaded) with the time it took, so that the
    compile column holds compiles only; None when torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    start = time.perf_counter()
    import torch

    from ..runtime import frameworks

    frameworks.load_present()  # tilejit's torch adapter, loaded with torch
    print_fn(f"torch {torch.__version__} imported ({(time.perf_counter() - start) * 1e3:.0f} ms, "
             "not counted below)")
    return torch


def _cpu_inputs(torch):
    """``(name, rand, randn, check_against)`` for the framework the CPU rows run on: torch
    when installed, else NumPy."""
    if torch is not None:
        torch.manual_seed(0)
        return ("torch", torch.rand, torch.randn,
                lambda got, want: (got - want).abs().max().item())
    import numpy

    generator = numpy.random.default_rng(0)
    return ("NumPy", lambda *shape: generator.random(shape, dtype=numpy.float32),
            lambda *shape: generator.standard_normal(shape, dtype=numpy.float32),
            lambda got, want: float(numpy.abs(got - want).max()))


def run(print_fn=print, target="cpu") -> bool:
    """Runs the demo; returns True when every kernel matches its framework's own result.
    The kernels run on torch tensors, or on NumPy arrays when torch is not installed; and
    on JAX arrays too when JAX is installed."""
    if target == "cuda":
        return run_cuda(print_fn)
    torch = _framework(print_fn)
    if torch is None:
        print_fn("torch is not installed: the kernels run on NumPy arrays"
                 + (" and JAX arrays" if importlib.util.find_spec("jax") else ""))
    name, rand, randn, error = _cpu_inputs(torch)
    (vec_prog, vec_out), (mm_prog, mm_out), (rs_prog, rs_out) = programs()
    rows = []
    # The wrapper is built once per interpreter (seconds, on first use): do it up front so
    # the compile column shows kernel compiles only (cold, or found in the disk cache).
    start = time.perf_counter()
    backend = resolve_backend("auto")
    print_fn(f"backend {backend} ready ({(time.perf_counter() - start) * 1e3:.0f} ms)")

    def build(prog, out):
        start = time.perf_counter()
        kernel = compile(prog, out_idx=out, target="cpu")
        return kernel, (time.perf_counter() - start) * 1e3

    vec_add, t_vec = build(vec_prog, vec_out)
    for size in (1000, 1 << 20):
        a, b = rand(size), rand(size)
        rows.append(("vec_add", f"({size},)", error(vec_add(a, b), a + b), t_vec,
                     _per_call_us(vec_add, a, b)))

    matmul, t_mm = build(mm_prog, mm_out)
    for m in (1, 257):
        a, b = randn(m, 128), randn(128, 64)
        rows.append(("matmul", f"({m}, 128) @ (128, 64)", error(matmul(a, b), a @ b), t_mm,
                     _per_call_us(matmul, a, b, calls=200)))

    row_stats, t_rs = build(rs_prog, rs_out)
    x = randn(300, 100)[:, :77]  # a strided view: rows 100 apart
    mx, sm = row_stats(x)
    err = max(error(mx, x.max(1) if torch is None else x.amax(dim=1)), error(sm, x.sum(1)))
    rows.append(("row_stats (max, sum)", "(300, 77) strided", err, t_rs,
                 _per_call_us(row_stats, x, calls=500)))

    ok = _report(rows, print_fn, name)
    if importlib.util.find_spec("jax") is not None:
        ok = run_jax((vec_add, t_vec), (matmul, t_mm), (row_stats, t_rs), print_fn) and ok
    return ok


def run_jax(vec_add, matmul, row_stats, print_fn=print) -> bool:
    """The same kernels called with JAX arrays, eagerly and inside ``jax.jit`` (XLA custom
    calls, docs/jax.md), against ``jax.numpy``; each argument is ``(kernel, compile ms)``."""
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp

    imported = (time.perf_counter() - start) * 1e3
    print_fn("")
    print_fn(f"JAX {jax.__version__} ({jax.default_backend()}, imported in {imported:.0f} ms): "
             "the same kernels as XLA custom calls")
    key = jax.random.PRNGKey(0)
    rows = []
    (add, t_add), (mm, t_mm), (stats, t_stats) = vec_add, matmul, row_stats
    jitted_add = jax.jit(lambda a, b: add(a, b))
    for size in (1000, 1 << 20):
        a, b = jax.random.uniform(key, (size,)), jax.random.uniform(key, (size,)) + 1
        err = float(jnp.abs(jitted_add(a, b) - (a + b)).max())
        rows.append(("vec_add, jitted", f"({size},)", err, t_add,
                     _per_call_us(lambda x, y: jitted_add(x, y).block_until_ready(), a, b)))
    a, b = jax.random.normal(key, (257, 128)), jax.random.normal(key, (128, 64))
    err = float(jnp.abs(mm(a, b) - a @ b).max())
    rows.append(("matmul, eager", "(257, 128) @ (128, 64)", err, t_mm,
                 _per_call_us(lambda x, y: mm(x, y).block_until_ready(), a, b, calls=200)))
    x = jax.random.normal(key, (300, 77))
    jitted_stats = jax.jit(stats)
    mx, sm = jitted_stats(x)
    err = max(float(jnp.abs(mx - x.max(axis=1)).max()), float(jnp.abs(sm - x.sum(axis=1)).max()))
    rows.append(("row_stats (max, sum), jitted", "(300, 77)", err, t_stats,
                 _per_call_us(lambda v: jax.block_until_ready(jitted_stats(v)), x, calls=500)))
    return _report(rows, print_fn, "jax.numpy")


def _report(rows, print_fn, reference: str = "torch") -> bool:
    ok = all(err < 1e-3 for _, _, err, _, _ in rows)
    header = ("kernel", "shape", "max error", "compile ms", "per call us")
    table = [header] + [(k, s, f"{e:.2e}", f"{c:.1f}", f"{p:.2f}") for k, s, e, c, p in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print_fn("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
        if i == 0:
            print_fn("  ".join("-" * w for w in widths))
    print_fn(f"all kernels match {reference}" if ok else f"MISMATCH against {reference}")
    return ok


# ---- The same kernels in CUDA C ------------------------------------------------------------

CUDA_VEC_ADD = r"""
extern "C" __global__ void vec_add(const float *A, const float *B, float *C, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) C[i] = A[i] + B[i];
}
"""

CUDA_MATMUL = r"""
/* C[M, 64] = A[M, 128] @ B[128, 64]: one thread per element of C, M dynamic. */
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int64_t M) {
  int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= 64) return;
  float acc = 0.0f;
  for (int k = 0; k < 128; ++k) acc += A[row * 128 + k] * B[k * 64 + col];
  C[row * 64 + col] = acc;
}
"""

CUDA_ROW_STATS = r"""
/* One block of 256 threads per row: max and sum through dynamic shared memory. */
extern "C" __global__ void row_stats(const float *X, float *MAX, float *SUM, int64_t rows,
                                     int64_t cols, int64_t row_stride) {
  extern __shared__ float scratch[]; /* 2 * blockDim.x floats */
  float *m = scratch, *s = scratch + blockDim.x;
  const float *x = X + blockIdx.x * row_stride;
  float mine = -3.402823466e38f, total = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    mine = fmaxf(mine, x[c]);
    total += x[c];
  }
  m[threadIdx.x] = mine;
  s[threadIdx.x] = total;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      m[threadIdx.x] = fmaxf(m[threadIdx.x], m[threadIdx.x + half]);
      s[threadIdx.x] += s[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    MAX[blockIdx.x] = m[0];
    SUM[blockIdx.x] = s[0];
  }
}
"""


def cuda_programs():
    """The demo programs in CUDA C, with their launch configurations and out_idx."""
    params, out_idx, (n, m, rows) = _signatures()
    launch = {
        "vec_add": (CUDA_VEC_ADD, {"grid": (T.ceildiv(n, 256),), "block": (256,)}),
        "matmul": (CUDA_MATMUL, {"grid": (4, T.ceildiv(m, 16)), "block": (16, 16)}),
        "row_stats": (CUDA_ROW_STATS, {"grid": (rows,), "block": (256,),
                                       "shared_mem": 2 * 256 * 4}),
    }
    return [(Program(name, params[name], source, **shape), out_idx[name])
            for name, (source, shape) in launch.items()]


def run_cuda(print_fn=print) -> bool:
    """The demo on the GPU; says so and returns False when there is none."""
    import torch

    if not torch.cuda.is_available():
        print_fn("tilejit demo --target cuda: no CUDA GPU is available here "
                 "(torch.cuda.is_available() is False); nothing was run.")
        return False
    torch.manual_seed(0)
    dev = torch.device("cuda")
    (vec_prog, vec_out), (mm_prog, mm_out), (rs_prog, rs_out) = cuda_programs()
    rows = []

    def build(prog, out):
        start = time.perf_counter()
        kernel = compile(prog, out_idx=out, target="cuda")
        return kernel, (time.perf_counter() - start) * 1e3

    def timed(fn, *args, calls):
        def call_and_wait(*a):
            fn(*a)
            torch.cuda.synchronize()
        return _per_call_us(call_and_wait, *args, calls=calls)

    vec_add, t_vec = build(vec_prog, vec_out)
    for size in (1000, 1 << 20):
        a, b = torch.rand(size, device=dev), torch.rand(size, device=dev)
        err = (vec_add(a, b) - (a + b)).abs().max().item()
        rows.append(("vec_add", f"({size},)", err, t_vec, timed(vec_add, a, b, calls=2000)))

    matmul, t_mm = build(mm_prog, mm_out)
    for m in (1, 257):
        a, b = torch.randn(m, 128, device=dev), torch.randn(128, 64, device=dev)
        err = (matmul(a, b) - a @ b).abs().max().item()
        rows.append(("matmul", f"({m}, 128) @ (128, 64)", err, t_mm,
                     timed(matmul, a, b, calls=500)))

    row_stats, t_rs = build(rs_prog, rs_out)
    x = torch.randn(300, 100, device=dev)[:, :77]
    mx, sm = row_stats(x)
    err = max((mx - x.amax(dim=1)).abs().max().item(), (sm - x.sum(dim=1)).abs().max().item())
    rows.append(("row_stats (max, sum)", "(300, 77) strided", err, t_rs,
                 timed(row_stats, x, calls=500)))
    print_fn(f"on {torch.cuda.get_device_name()}")
    return _report(rows, print_fn)


# ---- TileLang kernels through tilejit (--tilelang) -------------------------------------------


def run_tilelang(print_fn=print) -> bool:
    """TileLang kernels through ``execution_backend="tilejit"``: on target "c" always, on
    the GPU when there is one; True when every kernel matches torch."""
    try:
        import tilelang
        import tilelang.language as TL
        import torch

        from .. import tilelang as _registers  # noqa: F401  (makes "tilejit" a backend)
    except ImportError as exc:
        print_fn(f"tilejit demo --tilelang: {exc}; install it with "
                 "pip install 'tilejit[tilelang]' (beside a pinned torch)")
        return False
    torch.manual_seed(0)
    axpy, row_sum, gemm = tilelang_kernels(TL)
    rows = []

    def build(func, out_idx, target):
        start = time.perf_counter()
        kernel = tilelang.compile(func, out_idx=out_idx, target=target,
                                  execution_backend="tilejit")
        return kernel, (time.perf_counter() - start) * 1e3

    k_axpy, t_axpy = build(axpy, -1, "c")
    for m, n in ((1, 1), (300, 77)):
        x, y = torch.randn(m, n), torch.randn(m, n)
        err = (k_axpy(x, y) - (2 * x + y)).abs().max().item()
        rows.append(("tilelang axpy (c)", f"({m}, {n})", err, t_axpy,
                     _per_call_us(k_axpy, x, y)))
    k_rows, t_rows = build(row_sum, [1], "c")
    a = torch.randn(257, 64)
    err = (k_rows(a) - a.sum(dim=1)).abs().max().item()
    rows.append(("tilelang row sum (c)", "(257, 64)", err, t_rows, _per_call_us(k_rows, a)))
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
        k_gemm, t_gemm = build(gemm, -1, {"kind": "cuda", "arch": arch})
        for m in (64, 1000):
            a = torch.randn(m, 256, device=dev, dtype=torch.float16)
            b = torch.randn(256, 256, device=dev, dtype=torch.float16)
            ref = a.float() @ b.float()
            # float16 output: the error relative to the largest element.
            err = ((k_gemm(a, b).float() - ref).abs().max() / ref.abs().max()).item()
            rows.append((f"tilelang gemm ({arch})", f"({m}, 256) @ (256, 256)", err, t_gemm,
                         _per_call_us(k_gemm, a, b, calls=500)))
        print_fn(f"on {torch.cuda.get_device_name()}")
    else:
        print_fn("no CUDA GPU here: the TileLang GEMM is not run (target c only)")
    return _report(rows, print_fn)
