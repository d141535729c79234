"""TileLang kernels that tilejit's demo, bench and tests compile, written as TileLang users
write them.

No ``from __future__ import annotations`` here: TileLang reads a kernel's annotations with
``typing.get_type_hints``, and on Python 3.10 that refuses a string annotation whose value is
no type (``TL.Tensor(...)`` is a buffer), so kernels must be defined where annotations are
evaluated at definition.
"""


def tilelang_kernels(TL):
    """An elementwise kernel, a row reduction and a GEMM with a dynamic M, as TileLang users
    write them (``TL`` is ``tilelang.language``)."""
    m, n = TL.dynamic("m"), TL.dynamic("n")

    @TL.prim_func
    def axpy(X: TL.Tensor((m, n), "float32"), Y: TL.Tensor((m, n), "float32"),
             Z: TL.Tensor((m, n), "float32")):
        with TL.Kernel(TL.ceildiv(n, 32), TL.ceildiv(m, 8), threads=128) as (bx, by):
            for i, j in TL.Parallel(8, 32):
                if by * 8 + i < m and bx * 32 + j < n:
                    Z[by * 8 + i, bx * 32 + j] = (2.0 * X[by * 8 + i, bx * 32 + j]
                                                  + Y[by * 8 + i, bx * 32 + j])

    @TL.prim_func
    def row_sum(A: TL.Tensor((m, 64), "float32"), S: TL.Tensor((m,), "float32")):
        with TL.Kernel(m, threads=1) as bx:
            acc = TL.alloc_local((1,), "float32")
            acc[0] = 0.0
            for j in TL.serial(64):
                acc[0] += A[bx, j]
            S[bx] = acc[0]

    @TL.prim_func
    def gemm(A: TL.Tensor((m, 256), "float16"), B: TL.Tensor((256, 256), "float16"),
             C: TL.Tensor((m, 256), "float16")):
        with TL.Kernel(4, TL.ceildiv(m, 64), threads=128) as (bx, by):
            a_s = TL.alloc_shared((64, 32), "float16")
            b_s = TL.alloc_shared((32, 64), "float16")
            c_l = TL.alloc_fragment((64, 64), "float")
            TL.clear(c_l)
            for ko in TL.Pipelined(8, num_stages=2):
                TL.copy(A[by * 64, ko * 32], a_s)
                TL.copy(B[ko * 32, bx * 64], b_s)
                TL.gemm(a_s, b_s, c_l)
            TL.copy(c_l, C[by * 64, bx * 64])

    return axpy, row_sum, gemm


def noop_kernel(TL):
    """A TileLang kernel on three float32 vectors of dynamic length that does nothing but
    read every argument (the bench's case E)."""
    n = TL.dynamic("n")

    @TL.prim_func
    def noop(A: TL.Tensor((n,), "float32"), B: TL.Tensor((n,), "float32"),
             C: TL.Tensor((n,), "float32")):
        with TL.Kernel(1, threads=1) as _:
            if n < 0:  # never: the kernel does nothing, and reads every argument
                C[0] = A[0] + B[0]

    return noop
