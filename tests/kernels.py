"""Kernel sources several test files share."""

VEC_ADD = """
void vec_add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""
