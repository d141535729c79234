/*
 * The layout algebra of views: every example of the CuTe DSL reference page
 * (with the layouts old PyTorch exported, size-1 dims carrying stride 1),
 * the rules around them, and randomised layouts (permutations of compact
 * tensors, with and without size-1 and broadcast modes) checked against a
 * separate, deliberately naive computation written here.
 */
#include <stdio.h>

#include "builders.h"
#include "tilejit/layout.h"

/* ---- Helpers -------------------------------------------------------------- */

static tj_layout make(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  tj_layout l;
  CHECK_OK(tj_layout_init(&l, ndim, shape, strides));
  return l;
}

static const char *text(const tj_layout *l) {
  static char buf[TJ_LAYOUT_FORMAT_SIZE];
  CHECK_OK(tj_layout_format(l, buf, sizeof(buf)));
  return buf;
}

/* mark_layout_dynamic with the reference's defaults: leading_dim -1 is None. */
static int mark_dynamic(tj_layout *l, int64_t leading_dim) {
  return leading_dim < 0 ? tj_layout_mark_dynamic(l, TJ_LEADING_DIM_DEDUCE, 0)
                         : tj_layout_mark_dynamic(l, TJ_LEADING_DIM_GIVEN, leading_dim);
}

/* mark_compact_shape_dynamic; order NULL is stride_order=None. */
static int mark_compact(tj_layout *l, int64_t mode, const int64_t *order, int32_t len,
                        int64_t div) {
  return tj_layout_mark_compact_shape_dynamic(l, mode, order, len, div);
}

/* A failing mark must leave the layout as it was, byte for byte. */
#define CHECK_FAILS_UNCHANGED(l, call, message)                \
  do {                                                         \
    tj_layout tjt_before_ = (l);                               \
    CHECK_STATUS((call), TJ_EVALUE);                           \
    CHECK_EQ_STR(tj_last_error(), (message));                  \
    CHECK(memcmp(&tjt_before_, &(l), sizeof(tj_layout)) == 0); \
  } while (0)

/* The reference page's tensors, as old PyTorch exported them. */
static const int64_t a_shape[] = {8, 4, 16, 2}, a_strides[] = {2, 16, 64, 1};
static const int64_t b_shape[] = {1, 4, 1, 32, 1}, b_strides[] = {1, 1, 1, 4, 1};
static const int64_t c_shape[] = {2, 2}, c_strides[] = {8, 2};
static const int64_t d_shape[] = {3, 4, 2, 5}, d_strides[] = {5, 0, 0, 1};

/* ---- Initialisation and printing ----------------------------------------- */

TEST(layout_init_and_format) {
  const int64_t shape[] = {30, 20}, strides[] = {20, 1};
  tj_layout l = make(2, shape, strides);
  CHECK(tj_layout_is_static(&l));
  CHECK_EQ_STR(text(&l), "(30, 20):(20, 1)");
  CHECK_EQ_INT(l.has_stride_order, 0);

  /* NULL strides are compact row-major, as in DLPack. */
  const int64_t shape3[] = {2, 3, 4};
  l = make(3, shape3, NULL);
  CHECK_EQ_STR(text(&l), "(2, 3, 4):(12, 4, 1)");
  CHECK_EQ_INT(l.tensor_stride[0], 12);

  /* One mode prints as a one-element Python tuple; none as (). */
  const int64_t one[] = {7};
  l = make(1, one, NULL);
  CHECK_EQ_STR(text(&l), "(7,):(1,)");
  l = make(0, NULL, NULL);
  CHECK_EQ_STR(text(&l), "():()");
  CHECK_OK(tj_layout_mark_dynamic(&l, TJ_LEADING_DIM_DEDUCE, 0));
  CHECK_EQ_STR(text(&l), "():()");

  /* Dynamic: compact, no spaces, and a single mode without a comma. */
  l = make(1, one, NULL);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 7));
  CHECK(!tj_layout_is_static(&l));
  CHECK_EQ_STR(text(&l), "(?{div=7}):(1)");
  l = make(1, one, NULL);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 1));
  CHECK_EQ_STR(text(&l), "(?):(1)");

  /* Negative strides print as they are. */
  const int64_t neg[] = {-1};
  l = make(1, one, neg);
  CHECK_EQ_STR(text(&l), "(7,):(-1,)");
}

TEST(layout_init_errors) {
  tj_layout l;
  int64_t shape[TJ_MAX_NDIM + 1] = {0};
  CHECK_STATUS(tj_layout_init(&l, TJ_MAX_NDIM + 1, shape, NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "a layout has 0 to 16 modes, got 17");
  CHECK_STATUS(tj_layout_init(&l, -1, shape, NULL), TJ_EVALUE);
  const int64_t bad[] = {3, -2};
  CHECK_STATUS(tj_layout_init(&l, 2, bad, NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "shape[1] = -2 is negative");
}

TEST(layout_format_limits) {
  /* The longest text there is fits TJ_LAYOUT_FORMAT_SIZE. */
  int64_t shape[TJ_MAX_NDIM], strides[TJ_MAX_NDIM];
  for (int32_t d = 0; d < TJ_MAX_NDIM; ++d) {
    shape[d] = 1;
    strides[d] = INT64_MIN;
  }
  tj_layout l = make(TJ_MAX_NDIM, shape, strides);
  char buf[TJ_LAYOUT_FORMAT_SIZE];
  CHECK_OK(tj_layout_format(&l, buf, sizeof(buf)));
  for (int32_t d = 0; d < TJ_MAX_NDIM; ++d) {
    l.shape_div[d] = INT64_MAX;
    l.stride_div[d] = INT64_MAX;
  }
  CHECK_OK(tj_layout_format(&l, buf, sizeof(buf)));
  CHECK(strlen(buf) > 800);
  /* A short buffer gets a truncated, terminated text and an error. */
  char small[8];
  CHECK_STATUS(tj_layout_format(&l, small, sizeof(small)), TJ_EVALUE);
  CHECK_EQ_INT(strlen(small), 7);
  CHECK_ERROR_CONTAINS("does not fit in 8 bytes");
}

/* ---- mark_layout_dynamic: the reference page ----------------------------- */

TEST(layout_ref_mark_dynamic) {
  /* Prose examples. */
  const int64_t p_shape[] = {2, 2, 3, 4}, p_strides[] = {2, 1, 4, 12};
  tj_layout l = make(4, p_shape, p_strides);
  CHECK_OK(mark_dynamic(&l, 1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?):(?,1,?,?)");
  l = make(4, p_shape, p_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 0), "Expected strides[leading_dim] == 1, but got 2");
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?):(?,1,?,?)");
  const int64_t q_shape[] = {1, 5, 1}, q_strides[] = {1, 1, 1};
  l = make(3, q_shape, q_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, -1),
                        "Can't deduce the leading dimension from layout, please specify the "
                        "leading_dim explicitly.");
  l = make(2, c_shape, c_strides);
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?):(?,?)");

  /* The code example, t0 .. t7. */
  l = make(4, a_shape, a_strides);
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?):(?,?,?,1)");
  l = make(5, b_shape, b_strides);
  CHECK_OK(mark_dynamic(&l, 0));
  CHECK_EQ_STR(text(&l), "(?,?,?,?,?):(1,?,?,?,?)");
  l = make(5, b_shape, b_strides);
  CHECK_OK(mark_dynamic(&l, 2));
  CHECK_EQ_STR(text(&l), "(?,?,?,?,?):(?,?,1,?,?)");
  l = make(2, c_shape, c_strides);
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?):(?,?)");
  l = make(4, d_shape, d_strides);
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?):(?,0,0,1)");
  l = make(5, b_shape, b_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, -1),
                        "Can't deduce the leading dimension from layout, please specify the "
                        "leading_dim explicitly.");
  l = make(4, a_shape, a_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 1), "Expected strides[leading_dim] == 1, but got 16");
  l = make(5, b_shape, b_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 3), "Expected strides[leading_dim] == 1, but got 4");
}

TEST(layout_mark_dynamic_rules) {
  tj_layout l = make(4, a_shape, a_strides);
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 4),
                        "Expected leading_dim value to be in range [0, 4), but got 4");
  CHECK_FAILS_UNCHANGED(l, tj_layout_mark_dynamic(&l, TJ_LEADING_DIM_GIVEN, -1),
                        "Expected leading_dim value to be in range [0, 4), but got -1");
  CHECK_FAILS_UNCHANGED(l, tj_layout_mark_dynamic(&l, 7, 0), "unknown leading-dimension rule 7");

  /* Marking twice is idempotent; a dynamic stride is never a leading one. */
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?):(?,?,?,1)");
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 0), "Expected strides[leading_dim] == 1, but got ?");

  /* After a compact marking: divisibility of dynamic shapes is kept, the
   * strides it rewrote decide the leading dimension, the order is
   * forgotten. */
  l = make(4, a_shape, a_strides);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 2));
  CHECK_FAILS_UNCHANGED(l, mark_dynamic(&l, 1),
                        "Expected strides[leading_dim] == 1, but got ?{div=4}");
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?{div=2},?,?,?):(?,?,?,1)");
  CHECK_EQ_INT(l.has_stride_order, 0);

  /* Old-PyTorch b after a compact marking: its size-1 modes now have stride
   * 0, so the leading dimension is no longer ambiguous, and 0 is kept. */
  const int64_t order[] = {2, 3, 4, 0, 1};
  l = make(5, b_shape, b_strides);
  CHECK_OK(mark_compact(&l, 2, order, 5, 1));
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_EQ_STR(text(&l), "(?,?,?,?,?):(0,1,?,?,0)");

  /* Shapes and the tensor's strides stay as imported. */
  CHECK_EQ_INT(l.shape[3], 32);
  CHECK_EQ_INT(l.tensor_stride[3], 4);
}

TEST(layout_implicit_leading_dim) {
  int32_t lead = 99;
  /* A unique stride-1 mode, as with DEDUCE. */
  tj_layout l = make(4, a_shape, a_strides);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, 3);
  /* None: -1. */
  l = make(2, c_shape, c_strides);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, -1);
  /* Size-1 modes lose ties: old-PyTorch b leads with mode 1 (4:1). */
  l = make(5, b_shape, b_strides);
  CHECK_STATUS(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_DEDUCE, &lead), TJ_EVALUE);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, 1);
  CHECK_OK(tj_layout_mark_dynamic(&l, TJ_LEADING_DIM_IMPLICIT, 0));
  CHECK_EQ_STR(text(&l), "(?,?,?,?,?):(?,1,?,?,?)");
  /* Current PyTorch's (5, 1) tensor has strides (1, 1): mode 0 leads. */
  const int64_t col_shape[] = {5, 1}, col_strides[] = {1, 1};
  l = make(2, col_shape, col_strides);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, 0);
  /* Only size-1 candidates: the last one. */
  const int64_t ones[] = {1, 1, 1}, unit[] = {1, 1, 1};
  l = make(3, ones, unit);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, 2);
  /* Two stride-1 modes of size > 1 overlap: no leading dimension. */
  const int64_t o_shape[] = {3, 4}, o_strides[] = {1, 1};
  l = make(2, o_shape, o_strides);
  CHECK_OK(tj_layout_deduce_leading_dim(&l, TJ_LEADING_DIM_IMPLICIT, &lead));
  CHECK_EQ_INT(lead, -1);
  CHECK_OK(tj_layout_mark_dynamic(&l, TJ_LEADING_DIM_IMPLICIT, 0));
  CHECK_EQ_STR(text(&l), "(?,?):(?,?)");
}

/* ---- mark_compact_shape_dynamic: the reference page ---------------------- */

TEST(layout_ref_stride_order) {
  int32_t order[TJ_MAX_NDIM];
  const int64_t s1[] = {4, 2}, t1[] = {1, 4};
  tj_layout l = make(2, s1, t1);
  CHECK_OK(tj_layout_deduce_stride_order(&l, order));
  CHECK_EQ_INT(order[0], 1);
  CHECK_EQ_INT(order[1], 0);
  const int64_t s2[] = {5, 3, 2, 4}, t2[] = {3, 1, 15, 30};
  l = make(4, s2, t2);
  CHECK_OK(tj_layout_deduce_stride_order(&l, order));
  const int32_t want2[] = {3, 2, 0, 1};
  CHECK(memcmp(order, want2, sizeof(want2)) == 0);
  const int64_t s3[] = {2, 2, 3, 4}, t3[] = {2, 1, 4, 12};
  l = make(4, s3, t3);
  CHECK_OK(tj_layout_deduce_stride_order(&l, order));
  CHECK(memcmp(order, want2, sizeof(want2)) == 0);
  const int64_t s4[] = {1, 5, 1}, t4[] = {1, 1, 1};
  l = make(3, s4, t4);
  CHECK_STATUS(tj_layout_deduce_stride_order(&l, order), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "The layout could not be deduced, please specify the stride_order explicitly");
  /* Ties: size > 1 outside size 1, then mode order; this is
   * torch.Tensor.dim_order() of current PyTorch's b, (3, 0, 2, 4, 1). */
  const int64_t b_now[] = {4, 1, 4, 4, 4};
  l = make(5, b_shape, b_now);
  CHECK_OK(tj_layout_deduce_stride_order(&l, order));
  const int32_t want_b[] = {3, 0, 2, 4, 1};
  CHECK(memcmp(order, want_b, sizeof(want_b)) == 0);
}

TEST(layout_ref_mark_compact) {
  tj_layout l = make(4, a_shape, a_strides);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 2));
  CHECK_EQ_STR(text(&l), "(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)");
  const int32_t deduced[] = {2, 1, 0, 3};
  CHECK_EQ_INT(l.has_stride_order, 1);
  CHECK(memcmp(l.stride_order, deduced, sizeof(deduced)) == 0);

  l = make(4, a_shape, a_strides);
  CHECK_OK(mark_compact(&l, 1, NULL, 0, 2));
  CHECK_EQ_STR(text(&l), "(8,?{div=2},16,2):(2,16,?{div=32},1)");

  tj_layout t2 = make(4, a_shape, a_strides);
  CHECK_OK(mark_compact(&t2, 1, NULL, 0, 2));
  CHECK_OK(mark_compact(&t2, 3, NULL, 0, 2));
  CHECK_EQ_STR(text(&t2), "(8,?{div=2},16,?{div=2}):(?{div=2},?{div=16},?{div=32},1)");

  const int64_t o3[] = {3, 0, 2, 4, 1};
  l = make(5, b_shape, b_strides);
  CHECK_OK(mark_compact(&l, 2, o3, 5, 1));
  CHECK_EQ_STR(text(&l), "(1,4,?,32,1):(0,1,4,?{div=4},0)");

  const int64_t o4[] = {2, 3, 4, 0, 1};
  l = make(5, b_shape, b_strides);
  CHECK_OK(mark_compact(&l, 2, o4, 5, 1));
  CHECK_EQ_STR(text(&l), "(1,4,?,32,1):(0,1,128,4,0)");

  const int64_t o5[] = {0, 1, 2, 3};
  CHECK_FAILS_UNCHANGED(t2, mark_compact(&t2, 3, o5, 4, 5),
                        "The stride_order is not consistent with the last stride_order");
  CHECK_EQ_STR(text(&t2), "(8,?{div=2},16,?{div=2}):(?{div=2},?{div=16},?{div=32},1)");

  l = make(4, a_shape, a_strides);
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 3, o5, 4, 5),
                        "The stride_order is not consistent with the deduced stride_order");

  l = make(5, b_shape, b_strides);
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, NULL, 0, 4),
                        "The layout could not be deduced, please specify the stride_order "
                        "explicitly");
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 30, o3, 5, 5),
                        "Expected mode value to be in range [0, 5), but got 30");
  const int64_t o9[] = {2, 1, 2, 3, 4};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 3, o9, 5, 5),
                        "Expected stride_order to contain all the dimensions of the tensor, but it "
                        "doesn't contain 0.");
  const int64_t o10[] = {0, 1, 2, 3, 4, 5};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 3, o10, 6, 5),
                        "Expected stride_order to have 5 elements, but got 6.");
  /* b.dim_order() of old PyTorch. */
  const int64_t o11[] = {3, 2, 4, 0, 1};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, o11, 5, 4),
                        "The shape(1) of mode(0) is not divisible by the divisibility(4)");
  const int64_t o12[] = {2, 1, 3, 0, 4};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, o12, 5, 1),
                        "The stride_order is not consistent with the layout");
}

TEST(layout_mark_compact_rules) {
  tj_layout l = make(4, a_shape, a_strides);
  const int64_t o5[] = {0, 1, 2, 3};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, NULL, 0, 0),
                        "Expected divisibility to be a positive integer, but got 0");
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, -1, o5, 4, 1),
                        "Expected mode value to be in range [0, 4), but got -1");
  /* The length is checked before the array is read: a caller may report a
   * length longer than what it holds. */
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, o5, 1000, 1),
                        "Expected stride_order to have 4 elements, but got 1000.");
  const int64_t huge[] = {0, 1, 2, INT64_MAX};
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, huge, 4, 1),
                        "Expected stride_order to contain all the dimensions of the tensor, but it "
                        "doesn't contain 3.");
  /* A given order equal to the deduced one, and chaining with the same one. */
  const int64_t deduced[] = {2, 1, 0, 3};
  CHECK_OK(mark_compact(&l, 2, deduced, 4, 4));
  CHECK_OK(mark_compact(&l, 0, deduced, 4, 8));
  CHECK_EQ_STR(text(&l), "(?{div=8},4,?{div=4},2):(2,?{div=16},?{div=64},1)");
  /* Marking a dynamic mode again replaces its divisibility. */
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 1));
  CHECK_EQ_STR(text(&l), "(?,4,?{div=4},2):(2,?{div=2},?{div=8},1)");

  /* Not compact: strided, and broadcast. */
  l = make(2, c_shape, c_strides);
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, NULL, 0, 1),
                        "The layout (2, 2):(8, 2) is not compact; mark_compact_shape_dynamic needs "
                        "a compact layout (mark_layout_dynamic takes any)");
  l = make(4, d_shape, d_strides);
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 0, NULL, 0, 1),
                        "The layout (3, 4, 2, 5):(5, 0, 0, 1) is not compact; "
                        "mark_compact_shape_dynamic needs a compact layout (mark_layout_dynamic "
                        "takes any)");

  /* Column-major and a zero-size tensor. */
  const int64_t cm_shape[] = {4, 2}, cm_strides[] = {1, 4};
  l = make(2, cm_shape, cm_strides);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 4));
  CHECK_EQ_STR(text(&l), "(?{div=4},2):(1,?{div=4})");
  const int64_t z_shape[] = {0, 3};
  l = make(2, z_shape, NULL);
  CHECK_OK(mark_compact(&l, 1, NULL, 0, 3));
  CHECK_EQ_STR(text(&l), "(0,?{div=3}):(?{div=3},1)");
  l = make(2, z_shape, NULL);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 5));
  CHECK_EQ_STR(text(&l), "(?{div=5},3):(3,1)");

  /* After mark_layout_dynamic: the tensor's strides still give the order,
   * and every shape stays dynamic. */
  l = make(4, a_shape, a_strides);
  CHECK_OK(mark_dynamic(&l, -1));
  CHECK_OK(mark_compact(&l, 1, NULL, 0, 2));
  CHECK_EQ_STR(text(&l), "(?,?{div=2},?,?):(?,?,?{div=2},1)");

  /* Large extents are fine: the outermost one is in no stride. */
  const int64_t big_shape[] = {1ll << 40, 1ll << 40}, big_strides[] = {1ll << 40, 1};
  l = make(2, big_shape, big_strides);
  CHECK_OK(mark_compact(&l, 0, NULL, 0, 1ll << 40));
  CHECK_EQ_STR(text(&l), "(?{div=1099511627776},1099511627776):(1099511627776,1)");
  /* Divisibilities multiplied past 64 bits are an error, not a wrap (an
   * empty mode is divisible by anything). */
  const int64_t e_shape[] = {2, 0, 3}, e_strides[] = {1, 1, 1}, e_order[] = {0, 1, 2};
  l = make(3, e_shape, e_strides);
  CHECK_FAILS_UNCHANGED(l, mark_compact(&l, 1, e_order, 3, 1ll << 62),
                        "the strides of this layout overflow 64 bits");
}

TEST(layout_names) {
  char buf[64];
  const struct {
    DLDataType dtype;
    const char *name;
  } cases[] = {
      {TJT_DTYPE(kDLFloat, 32), "Float32"},
      {TJT_DTYPE(kDLFloat, 16), "Float16"},
      {TJT_DTYPE(kDLFloat, 64), "Float64"},
      {TJT_DTYPE(kDLBfloat, 16), "BFloat16"},
      {TJT_DTYPE(kDLInt, 8), "Int8"},
      {TJT_DTYPE(kDLInt, 64), "Int64"},
      {TJT_DTYPE(kDLUInt, 8), "Uint8"},
      {TJT_DTYPE(kDLUInt, 64), "Uint64"},
      {TJT_DTYPE(kDLBool, 8), "Boolean"},
      {TJT_DTYPE(kDLFloat8_e4m3fn, 8), "Float8E4M3FN"},
      {TJT_DTYPE(kDLFloat8_e5m2, 8), "Float8E5M2"},
      {TJT_DTYPE(kDLComplex, 64), "Complex64"},
      {TJT_DTYPE(kDLComplex, 128), "Complex128"},
      {TJT_DTYPE(kDLOpaqueHandle, 64), "handle"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    tj_element_type_format(cases[i].dtype, buf, sizeof(buf));
    CHECK_EQ_STR(buf, cases[i].name);
  }
  DLDataType vec = {kDLFloat, 32, 4};
  tj_element_type_format(vec, buf, sizeof(buf));
  CHECK_EQ_STR(buf, "Float32x4");
  CHECK_EQ_STR(tj_memspace_name(kDLCPU), "generic");
  CHECK_EQ_STR(tj_memspace_name(kDLCUDAHost), "generic");
  CHECK_EQ_STR(tj_memspace_name(kDLROCMHost), "generic");
  CHECK_EQ_STR(tj_memspace_name(kDLCUDA), "gmem");
  CHECK_EQ_STR(tj_memspace_name(kDLCUDAManaged), "gmem");
  CHECK_EQ_STR(tj_memspace_name(kDLOneAPI), "gmem");
}

TEST(layout_assumed_align) {
  int64_t align = 0;
  CHECK_OK(tj_check_assumed_align(0x1000, TJT_F32, 0, &align));
  CHECK_EQ_INT(align, 4);
  CHECK_OK(tj_check_assumed_align(0x1004, TJT_F32, 0, &align));
  CHECK_OK(tj_check_assumed_align(0x1000, TJT_F32, 64, &align));
  CHECK_EQ_INT(align, 64);
  CHECK_STATUS(tj_check_assumed_align(0x1004, TJT_F32, 16, &align), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "The tensor's base address 0x0000000000001004 is not divisible by assumed_align "
               "(16 bytes)");
  CHECK_STATUS(tj_check_assumed_align(0x1002, TJT_F32, 0, &align), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("(4 bytes)");
  CHECK_STATUS(tj_check_assumed_align(0x1000, TJT_F32, 12, &align), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "assumed_align must be a positive power of two, got 12");
  CHECK_STATUS(tj_check_assumed_align(0x1000, TJT_F32, -4, &align), TJ_EVALUE);
  /* Sub-byte and one-byte types are byte-aligned. */
  CHECK_OK(tj_check_assumed_align(0x1001, TJT_DTYPE(kDLBool, 8), 0, &align));
  CHECK_EQ_INT(align, 1);
}

/* ---- Randomised layouts -------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void) {
  /* xorshift64*: deterministic, so a failure reproduces. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

static int64_t pick(int64_t n) { return (int64_t)(rng() % (uint64_t)n); }

/* A random tensor: a permutation of a compact one (modes nested in `perm`,
 * outermost first). Size-1 modes get the stride PyTorch gives them today
 * (the product inside), old PyTorch's 1, or an arbitrary value; with
 * `broadcast`, one mode is expanded to size > 1 with stride 0. */
typedef struct {
  int32_t ndim;
  int64_t shape[8];
  int64_t strides[8];
  int32_t perm[8];
  int32_t broadcast; /* the expanded mode, or -1 */
} sample;

static sample random_sample(int with_unit, int with_broadcast) {
  sample s;
  static const int64_t extents[] = {2, 3, 4, 6, 8, 16};
  s.ndim = 1 + (int32_t)pick(6);
  for (int32_t d = 0; d < s.ndim; ++d) {
    s.perm[d] = d;
    s.shape[d] = with_unit && pick(3) == 0 ? 1 : extents[pick(6)];
  }
  for (int32_t d = s.ndim - 1; d > 0; --d) {
    int32_t j = (int32_t)pick(d + 1), t = s.perm[d];
    s.perm[d] = s.perm[j];
    s.perm[j] = t;
  }
  s.broadcast = with_broadcast ? (int32_t)pick(s.ndim) : -1;
  if (s.broadcast >= 0) s.shape[s.broadcast] = 1;
  int64_t inner = 1;
  for (int32_t i = s.ndim - 1; i >= 0; --i) {
    int32_t m = s.perm[i];
    s.strides[m] = inner;
    inner *= s.shape[m];
  }
  int style = (int)pick(3);
  for (int32_t d = 0; d < s.ndim; ++d)
    if (s.shape[d] == 1 && d != s.broadcast && style > 0)
      s.strides[d] = style == 1 ? 1 : 1 + pick(100);
  if (s.broadcast >= 0) {
    s.shape[s.broadcast] = 2 + pick(3);
    s.strides[s.broadcast] = 0;
  }
  return s;
}

/* The expected text of a compact marking, computed naively: each stride is
 * the product over the modes nested inside it in `order`. `div[m]` is 0 for
 * a static mode, else its divisibility. */
static void expected_compact(const sample *s, const int32_t *order, const int64_t *div, char *out,
                             size_t size) {
  char shapes[512] = "", strides[512] = "";
  for (int32_t d = 0; d < s->ndim; ++d) {
    char item[64];
    if (div[d])
      snprintf(item, sizeof(item), div[d] == 1 ? "?" : "?{div=%lld}", (long long)div[d]);
    else
      snprintf(item, sizeof(item), "%lld", (long long)s->shape[d]);
    if (d) strcat(shapes, ",");
    strcat(shapes, item);
    int32_t pos = 0;
    while (order[pos] != d) ++pos;
    int64_t factor = 1, divs = 1;
    int dynamic = 0;
    for (int32_t j = pos + 1; j < s->ndim; ++j) {
      int32_t m = order[j];
      if (div[m]) {
        dynamic = 1;
        divs *= div[m];
      } else {
        factor *= s->shape[m];
      }
    }
    if (!div[d] && s->shape[d] == 1)
      snprintf(item, sizeof(item), "0");
    else if (dynamic)
      snprintf(item, sizeof(item), factor * divs == 1 ? "?" : "?{div=%lld}",
               (long long)(factor * divs));
    else
      snprintf(item, sizeof(item), "%lld", (long long)factor);
    if (d) strcat(strides, ",");
    strcat(strides, item);
  }
  snprintf(out, size, "(%s):(%s)", shapes, strides);
}

/* Naive: strides never grow inwards along `order` (every pair compared). */
static int naive_descending(const sample *s, const int32_t *order) {
  for (int32_t i = 0; i < s->ndim; ++i)
    for (int32_t j = i + 1; j < s->ndim; ++j)
      if (s->strides[order[j]] > s->strides[order[i]]) return 0;
  return 1;
}

static int unit_strides(const sample *s) {
  int n = 0;
  for (int32_t d = 0; d < s->ndim; ++d) n += s->strides[d] == 1;
  return n;
}

/* Checks a successful compact marking against the tensor: every static
 * stride of a mode that is stepped over equals the tensor's, and every
 * dynamic one divides it. */
static void check_against_tensor(const sample *s, const tj_layout *l) {
  for (int32_t d = 0; d < s->ndim; ++d) {
    if (s->shape[d] == 1) continue;
    if (l->stride_div[d])
      CHECK_EQ_INT(s->strides[d] % l->stride_div[d], 0);
    else
      CHECK_EQ_INT(l->stride[d], s->strides[d]);
  }
}

static int64_t random_divisor(int64_t n) {
  int64_t divisors[32];
  int32_t k = 0;
  for (int64_t v = 1; v <= n && k < 32; ++v)
    if (n % v == 0) divisors[k++] = v;
  return divisors[pick(k)];
}

/* The order deduced for `before`, into `deduced`: a permutation along which
 * strides never grow, nesting the modes of size > 1 as the tensor was built. */
static void check_deduced_order(const sample *s, const tj_layout *before, int32_t *deduced) {
  CHECK_OK(tj_layout_deduce_stride_order(before, deduced));
  int32_t seen[8] = {0};
  for (int32_t i = 0; i < s->ndim; ++i) ++seen[deduced[i]];
  for (int32_t d = 0; d < s->ndim; ++d) CHECK_EQ_INT(seen[d], 1);
  CHECK(naive_descending(s, deduced));
  int32_t i = 0, j = 0;
  while (i < s->ndim && j < s->ndim) {
    if (s->shape[deduced[i]] == 1) {
      ++i;
    } else if (s->shape[s->perm[j]] == 1) {
      ++j;
    } else {
      CHECK_EQ_INT(deduced[i], s->perm[j]);
      ++i, ++j;
    }
  }
}

/* A compact layout marked again: another mode, no order (the last one is
 * reused), then a different order, which is refused. */
static void check_compact_chain(const sample *s, tj_layout *l, const int32_t *order, int64_t *div) {
  char want[1024];
  int32_t mode2 = (int32_t)pick(s->ndim);
  div[mode2] = random_divisor(s->shape[mode2]);
  CHECK_OK(mark_compact(l, mode2, NULL, 0, div[mode2]));
  expected_compact(s, order, div, want, sizeof(want));
  CHECK_EQ_STR(text(l), want);
  check_against_tensor(s, l);
  if (s->ndim > 1) {
    int64_t other[8];
    for (int32_t k = 0; k < s->ndim; ++k) other[k] = order[(k + 1) % s->ndim];
    tj_layout kept = *l;
    CHECK_STATUS(mark_compact(l, mode2, other, s->ndim, 1), TJ_EVALUE);
    CHECK_EQ_STR(tj_last_error(), "The stride_order is not consistent with the last stride_order");
    CHECK(memcmp(&kept, l, sizeof(*l)) == 0);
  }
}

TEST(layout_random_compact) {
  rng_state = 0x5eed1a7e11a7e5ull;
  int32_t ok = 0, errors = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    sample s = random_sample(trial % 2, trial % 4 == 3);
    tj_layout l = make(s.ndim, s.shape, s.strides);
    int64_t div[8] = {0};
    int32_t mode = (int32_t)pick(s.ndim);
    div[mode] = random_divisor(s.shape[mode]);
    int give = (int)pick(2);
    int64_t given[8];
    for (int32_t i = 0; i < s.ndim; ++i) given[i] = s.perm[i];
    tj_layout before = l;
    int rc = mark_compact(&l, mode, give ? given : NULL, s.ndim, div[mode]);
    int ambiguous = unit_strides(&s) > 1;
    const int32_t *order = s.perm;
    int32_t deduced[8];
    if (s.broadcast >= 0) {
      /* Never compact: the expanded mode steps by 0. */
      CHECK_EQ_INT(rc, TJ_EVALUE);
      CHECK(memcmp(&before, &l, sizeof(l)) == 0);
      ++errors;
      continue;
    }
    if (!give && ambiguous) {
      CHECK_EQ_INT(rc, TJ_EVALUE);
      CHECK_ERROR_STARTS_WITH("The layout could not be deduced");
      ++errors;
      continue;
    }
    if (give && !ambiguous && !naive_descending(&s, s.perm)) {
      /* Old-PyTorch style size-1 strides out of place. */
      CHECK_EQ_INT(rc, TJ_EVALUE);
      CHECK_EQ_STR(tj_last_error(),
                   "The stride_order is not consistent with the deduced stride_order");
      ++errors;
      continue;
    }
    CHECK_OK(rc);
    if (!give) {
      check_deduced_order(&s, &before, deduced);
      order = deduced;
    }
    char want[1024];
    expected_compact(&s, order, div, want, sizeof(want));
    CHECK_EQ_STR(text(&l), want);
    check_against_tensor(&s, &l);
    ++ok;
    check_compact_chain(&s, &l, order, div);
    /* A divisibility that does not divide the extent. */
    int32_t mode3 = (int32_t)pick(s.ndim);
    int64_t bad = s.shape[mode3] + 1;
    CHECK_STATUS(mark_compact(&l, mode3, NULL, 0, bad), TJ_EVALUE);
    CHECK_ERROR_STARTS_WITH("The shape(");
  }
  tjt_note("%d compact markings checked, %d refused as expected", ok, errors);
  CHECK(ok > 1000 && errors > 500);
}

TEST(layout_random_mark_dynamic) {
  rng_state = 0xd1a6e5a11ull;
  for (int trial = 0; trial < 4000; ++trial) {
    sample s = random_sample(trial % 2, trial % 3 == 2);
    tj_layout l = make(s.ndim, s.shape, s.strides);
    int32_t units = 0, unit = -1, wide = 0, unit_wide = -1;
    for (int32_t d = 0; d < s.ndim; ++d)
      if (s.strides[d] == 1) {
        ++units;
        unit = d;
        if (s.shape[d] != 1) ++wide, unit_wide = d;
      }
    /* The expected text, by rule, for a leading dimension `lead`. */
    char want[512];
    for (int rule = 0; rule < 3; ++rule) {
      tj_layout m = l;
      int32_t lead;
      int rc;
      if (rule == 0) {
        lead = (int32_t)pick(s.ndim);
        rc = mark_dynamic(&m, lead);
        if (s.strides[lead] != 1) {
          CHECK_EQ_INT(rc, TJ_EVALUE);
          char msg[128];
          snprintf(msg, sizeof(msg), "Expected strides[leading_dim] == 1, but got %lld",
                   (long long)s.strides[lead]);
          CHECK_EQ_STR(tj_last_error(), msg);
          continue;
        }
      } else if (rule == 1) {
        rc = mark_dynamic(&m, -1);
        if (units > 1) {
          CHECK_EQ_INT(rc, TJ_EVALUE);
          CHECK_ERROR_STARTS_WITH("Can't deduce the leading dimension");
          continue;
        }
        lead = unit;
      } else {
        rc = tj_layout_mark_dynamic(&m, TJ_LEADING_DIM_IMPLICIT, 0);
        lead = units <= 1 ? unit : wide == 1 ? unit_wide : wide == 0 ? unit : -1;
      }
      CHECK_OK(rc);
      char shapes[128] = "", strides[128] = "";
      for (int32_t d = 0; d < s.ndim; ++d) {
        strcat(shapes, d ? ",?" : "?");
        strcat(strides, d ? "," : "");
        strcat(strides, d == lead ? "1" : s.strides[d] == 0 ? "0" : "?");
      }
      snprintf(want, sizeof(want), "(%s):(%s)", shapes, strides);
      CHECK_EQ_STR(text(&m), want);
      int32_t got = -2;
      if (rule) {
        CHECK_OK(tj_layout_deduce_leading_dim(&l, rule, &got));
        CHECK_EQ_INT(got, lead);
      }
    }
  }
}
