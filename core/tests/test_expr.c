/*
 * Expressions: evaluation of every op with Python (floor) semantics, errors
 * at evaluation, and the structural checks tj_kernel_add_expr makes so that
 * a registered expression can only fail on its values.
 */
#include "builders.h"

/* `a op b` over constants. */
static int64_t eval2(tj_op op, int64_t a, int64_t b) {
  const int64_t code[] = {TJ_OP_CONST, a, TJ_OP_CONST, b, op, 0};
  int64_t out = 0x7777;
  CHECK_OK(tj_expr_eval(code, 3, NULL, &out));
  return out;
}

static int eval2_status(tj_op op, int64_t a, int64_t b) {
  const int64_t code[] = {TJ_OP_CONST, a, TJ_OP_CONST, b, op, 0};
  int64_t out = 0x7777;
  int rc = tj_expr_eval(code, 3, NULL, &out);
  if (rc != TJ_OK) CHECK_EQ_INT(out, 0x7777); /* untouched on failure */
  return rc;
}

TEST(expr_arithmetic) {
  CHECK_EQ_INT(eval2(TJ_OP_ADD, 3, 4), 7);
  CHECK_EQ_INT(eval2(TJ_OP_SUB, 3, 4), -1);
  CHECK_EQ_INT(eval2(TJ_OP_MUL, -3, 4), -12);
  CHECK_EQ_INT(eval2(TJ_OP_MIN, -3, 4), -3);
  CHECK_EQ_INT(eval2(TJ_OP_MIN, 4, -3), -3);
  CHECK_EQ_INT(eval2(TJ_OP_MAX, -3, 4), 4);
  CHECK_EQ_INT(eval2(TJ_OP_MAX, 4, -3), 4);

  const int64_t neg[] = {TJ_OP_CONST, 5, TJ_OP_NEG, 0};
  int64_t out = 0;
  CHECK_OK(tj_expr_eval(neg, 2, NULL, &out));
  CHECK_EQ_INT(out, -5);

  const int64_t constant[] = {TJ_OP_CONST, 42};
  CHECK_OK(tj_expr_eval(constant, 1, NULL, &out));
  CHECK_EQ_INT(out, 42);

  /* (2 + 3) * 4 - 6 = 14: operands are taken in push order. */
  const int64_t rpn[] = {TJ_OP_CONST, 2, TJ_OP_CONST, 3, TJ_OP_ADD, 0, TJ_OP_CONST, 4,
                         TJ_OP_MUL,   0, TJ_OP_CONST, 6, TJ_OP_SUB, 0};
  CHECK_OK(tj_expr_eval(rpn, 7, NULL, &out));
  CHECK_EQ_INT(out, 14);
}

TEST(expr_floor_semantics) {
  /* Python: 7 // 2, -7 // 2, 7 // -2, -7 // -2 */
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, 7, 2), 3);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, -7, 2), -4);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, 7, -2), -4);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, -7, -2), 3);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, -8, 2), -4);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, 0, -3), 0);
  /* The remainder takes the divisor's sign. */
  CHECK_EQ_INT(eval2(TJ_OP_MOD, 7, 2), 1);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, -7, 2), 1);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, 7, -2), -1);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, -7, -2), -1);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, -8, 2), 0);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, -1, 16), 15);
  /* ceildiv(a, b) == -((-a) // b) */
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, 7, 2), 4);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, 8, 2), 4);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, -7, 2), -3);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, 7, -2), -3);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, -7, -2), 4);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, 0, 256), 0);
  CHECK_EQ_INT(eval2(TJ_OP_CEILDIV, 1000, 256), 4);
}

TEST(expr_symbols) {
  const int64_t symbols[] = {5, 12};
  /* n * 2 + m // 5 with n = 5, m = 12 */
  const int64_t code[] = {TJ_OP_SYM,   0, TJ_OP_CONST,    2, TJ_OP_MUL, 0, TJ_OP_SYM, 1,
                          TJ_OP_CONST, 5, TJ_OP_FLOORDIV, 0, TJ_OP_ADD, 0};
  int64_t out = 0;
  CHECK_OK(tj_expr_eval(code, 7, symbols, &out));
  CHECK_EQ_INT(out, 12);
  /* ceildiv(m, n) */
  const int64_t cd[] = {TJ_OP_SYM, 1, TJ_OP_SYM, 0, TJ_OP_CEILDIV, 0};
  CHECK_OK(tj_expr_eval(cd, 3, symbols, &out));
  CHECK_EQ_INT(out, 3);
}

TEST(expr_division_by_zero) {
  CHECK_STATUS(eval2_status(TJ_OP_FLOORDIV, 7, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("division by zero");
  CHECK_STATUS(eval2_status(TJ_OP_MOD, 7, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("division by zero");
  CHECK_STATUS(eval2_status(TJ_OP_CEILDIV, 7, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("division by zero");
  CHECK_STATUS(eval2_status(TJ_OP_FLOORDIV, 0, 0), TJ_EVALUE);

  /* At bind time it names the argument and the expression:
   * k(A: (n,), B: (m,), C: (n // m,)) with m == 0. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("divk", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t n = tjt_sym(k, 0), m = tjt_sym(k, 1);
  const int64_t q[] = {TJ_OP_SYM, 0, TJ_OP_SYM, 1, TJ_OP_FLOORDIV, 0};
  int32_t nm = tjt_expr(k, "n // m", 3, q);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &m, NULL, 0, 0);
  tjt_buffer(k, 2, "C", TJT_F32, 1, &nm, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a, b, c;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 0);
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  tj_arg args[3];
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  tjt_arg_tensor(&args[2], &c, 0);
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("divk: argument 2 'C': ");
  CHECK_ERROR_CONTAINS("n // m");
  CHECK_ERROR_CONTAINS("division by zero");
  tj_kernel_free(k);
}

TEST(expr_eval_malformed) {
  int64_t out = 0;
  const int64_t underflow[] = {TJ_OP_CONST, 1, TJ_OP_ADD, 0};
  CHECK_STATUS(tj_expr_eval(underflow, 2, NULL, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("malformed");
  const int64_t neg_empty[] = {TJ_OP_NEG, 0};
  CHECK_STATUS(tj_expr_eval(neg_empty, 1, NULL, &out), TJ_EVALUE);
  const int64_t leftover[] = {TJ_OP_CONST, 1, TJ_OP_CONST, 2};
  CHECK_STATUS(tj_expr_eval(leftover, 2, NULL, &out), TJ_EVALUE);
  CHECK_STATUS(tj_expr_eval(leftover, 0, NULL, &out), TJ_EVALUE);
  const int64_t unknown[] = {TJ_OP_CONST, 1, TJ_OP_CONST, 2, 99, 0};
  CHECK_STATUS(tj_expr_eval(unknown, 3, NULL, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("99");
  int64_t deep[2 * (TJ_MAX_EXPR_STACK + 1)];
  for (int i = 0; i <= TJ_MAX_EXPR_STACK; ++i) {
    deep[2 * i] = TJ_OP_CONST;
    deep[2 * i + 1] = i;
  }
  CHECK_STATUS(tj_expr_eval(deep, TJ_MAX_EXPR_STACK + 1, NULL, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("too deep");
}

TEST(expr_add_rejects_malformed) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("exprk", 0, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t id = -1;

  const int64_t one[] = {TJ_OP_CONST, 1};
  CHECK_STATUS(tj_kernel_add_expr(k, one, 0, "empty", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("empty");

  const int64_t underflow[] = {TJ_OP_CONST, 1, TJ_OP_ADD, 0};
  CHECK_STATUS(tj_kernel_add_expr(k, underflow, 2, "1 +", &id), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("exprk: ");
  CHECK_ERROR_CONTAINS("malformed expression '1 +'");

  const int64_t neg_empty[] = {TJ_OP_NEG, 0};
  CHECK_STATUS(tj_kernel_add_expr(k, neg_empty, 1, "-", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("malformed");

  const int64_t binary_first[] = {TJ_OP_MUL, 0, TJ_OP_CONST, 1, TJ_OP_CONST, 2};
  CHECK_STATUS(tj_kernel_add_expr(k, binary_first, 3, "* 1 2", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("malformed");

  const int64_t leftover[] = {TJ_OP_CONST, 1, TJ_OP_SYM, 0};
  CHECK_STATUS(tj_kernel_add_expr(k, leftover, 2, "1 n", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("malformed");

  const int64_t unknown[] = {TJ_OP_CONST, 1, TJ_OP_CONST, 2, 99, 0};
  CHECK_STATUS(tj_kernel_add_expr(k, unknown, 3, "1 ? 2", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("unknown op 99");
  const int64_t op_zero[] = {0, 0};
  CHECK_STATUS(tj_kernel_add_expr(k, op_zero, 1, "op0", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("unknown op 0");

  const int64_t undeclared[] = {TJ_OP_SYM, 1};
  CHECK_STATUS(tj_kernel_add_expr(k, undeclared, 1, "m", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("undeclared symbol #1");
  const int64_t negative_sym[] = {TJ_OP_SYM, -1};
  CHECK_STATUS(tj_kernel_add_expr(k, negative_sym, 1, "?", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("undeclared symbol");

  int64_t deep[2 * (TJ_MAX_EXPR_STACK + 1)];
  for (int i = 0; i <= TJ_MAX_EXPR_STACK; ++i) {
    deep[2 * i] = TJ_OP_CONST;
    deep[2 * i + 1] = i;
  }
  CHECK_STATUS(tj_kernel_add_expr(k, deep, TJ_MAX_EXPR_STACK + 1, "deep", &id), TJ_EVALUE);
  CHECK_EQ_INT(id, -1); /* no id handed out for a rejected program */

  /* Well-formed programs get ids 0, 1, ... */
  CHECK_OK(tj_kernel_add_expr(k, one, 1, "1", &id));
  CHECK_EQ_INT(id, 0);
  const int64_t n_plus_1[] = {TJ_OP_SYM, 0, TJ_OP_CONST, 1, TJ_OP_ADD, 0};
  CHECK_OK(tj_kernel_add_expr(k, n_plus_1, 3, "n + 1", &id));
  CHECK_EQ_INT(id, 1);
  const int64_t neg_n[] = {TJ_OP_SYM, 0, TJ_OP_NEG, 0};
  CHECK_OK(tj_kernel_add_expr(k, neg_n, 2, "-n", &id));
  CHECK_EQ_INT(id, 2);
  /* Exactly the stack limit is fine. */
  int64_t full[2 * (2 * TJ_MAX_EXPR_STACK - 1)];
  int32_t len = 0;
  for (int i = 0; i < TJ_MAX_EXPR_STACK; ++i, ++len) {
    full[2 * len] = TJ_OP_CONST;
    full[2 * len + 1] = 1;
  }
  for (int i = 0; i < TJ_MAX_EXPR_STACK - 1; ++i, ++len) {
    full[2 * len] = TJ_OP_ADD;
    full[2 * len + 1] = 0;
  }
  CHECK_OK(tj_kernel_add_expr(k, full, len, "1 + 1 + ...", &id));
  CHECK_EQ_INT(id, 3);
  int64_t out = 0;
  CHECK_OK(tj_expr_eval(full, len, NULL, &out));
  CHECK_EQ_INT(out, TJ_MAX_EXPR_STACK);
  tj_kernel_free(k);
}

TEST(expr_add_after_finalize) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("frozen", 0, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_finalize(k));
  const int64_t one[] = {TJ_OP_CONST, 1};
  int32_t id = -1;
  CHECK_STATUS(tj_kernel_add_expr(k, one, 1, "1", &id), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("finalized");
  CHECK_STATUS(tj_kernel_add_symbol(k, "n", 1), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("finalized");
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  tj_kernel_free(k);
}

TEST(expr_overflow) {
  /* Overflow is an error, never undefined behaviour (UBSan runs these). */
  CHECK_STATUS(eval2_status(TJ_OP_ADD, INT64_MAX, 1), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("overflow");
  CHECK_STATUS(eval2_status(TJ_OP_SUB, INT64_MIN, 1), TJ_EVALUE);
  CHECK_STATUS(eval2_status(TJ_OP_MUL, INT64_MAX / 2 + 1, 2), TJ_EVALUE);
  CHECK_STATUS(eval2_status(TJ_OP_FLOORDIV, INT64_MIN, -1), TJ_EVALUE);
  CHECK_STATUS(eval2_status(TJ_OP_MOD, INT64_MIN, -1), TJ_EVALUE);
  CHECK_STATUS(eval2_status(TJ_OP_CEILDIV, INT64_MIN, 3), TJ_EVALUE);
  const int64_t neg[] = {TJ_OP_CONST, INT64_MIN, TJ_OP_NEG, 0};
  int64_t out = 0;
  CHECK_STATUS(tj_expr_eval(neg, 2, NULL, &out), TJ_EVALUE);
  /* The edges that do fit still evaluate. */
  CHECK_EQ_INT(eval2(TJ_OP_ADD, INT64_MAX - 1, 1), INT64_MAX);
  CHECK_EQ_INT(eval2(TJ_OP_MOD, INT64_MIN, 3), 1);
  CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, INT64_MIN, 1), INT64_MIN);
}
