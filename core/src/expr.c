/* Evaluation of shape, stride and grid expressions over bound symbols. */
#include "internal.h"

/* Python's floor division: the quotient rounds towards negative infinity,
 * so `n // 4` means the same thing here as in the signature's Python. */
static int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  return q;
}

static int64_t floormod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static int overflow(void) { return tj_set_error(TJ_EVALUE, "integer overflow in expression"); }

int tj_expr_eval(const int64_t *code, int32_t n, const int64_t *symbols, int64_t *out) {
  TJ__REFUSE_NULL("tj_expr_eval", out);
  if (n > 0) TJ__REFUSE_NULL("tj_expr_eval", code);
  int64_t stack[TJ_MAX_EXPR_STACK];
  int32_t top = 0;
  for (int32_t pc = 0; pc < n; ++pc) {
    int64_t op = code[2 * pc], operand = code[2 * pc + 1];
    if (op == TJ_OP_CONST || op == TJ_OP_SYM) {
      if (top == TJ_MAX_EXPR_STACK) return tj_set_error(TJ_EVALUE, "expression too deep");
      stack[top++] = op == TJ_OP_CONST ? operand : symbols[operand];
      continue;
    }
    if (op == TJ_OP_NEG) {
      if (top < 1) return tj_set_error(TJ_EVALUE, "malformed expression");
      if (stack[top - 1] == INT64_MIN) return overflow();
      stack[top - 1] = -stack[top - 1];
      continue;
    }
    if (top < 2) return tj_set_error(TJ_EVALUE, "malformed expression");
    int64_t b = stack[--top], a = stack[top - 1], r;
    switch (op) {
      case TJ_OP_ADD:
        if (__builtin_add_overflow(a, b, &r)) return overflow();
        break;
      case TJ_OP_SUB:
        if (__builtin_sub_overflow(a, b, &r)) return overflow();
        break;
      case TJ_OP_MUL:
        if (__builtin_mul_overflow(a, b, &r)) return overflow();
        break;
      case TJ_OP_FLOORDIV:
      case TJ_OP_MOD:
      case TJ_OP_CEILDIV:
        if (b == 0) return tj_set_error(TJ_EVALUE, "division by zero in expression");
        if (b == -1 && a == INT64_MIN) return overflow();
        if (op == TJ_OP_CEILDIV && a == INT64_MIN) return overflow();
        r = op == TJ_OP_FLOORDIV ? floordiv(a, b)
            : op == TJ_OP_MOD    ? floormod(a, b)
                                 : -floordiv(-a, b);
        break;
      case TJ_OP_MIN: r = a < b ? a : b; break;
      case TJ_OP_MAX: r = a > b ? a : b; break;
      default: return tj_set_error(TJ_EVALUE, "unknown expression op %lld", (long long)op);
    }
    stack[top - 1] = r;
  }
  if (top != 1) return tj_set_error(TJ_EVALUE, "malformed expression");
  *out = stack[0];
  return TJ_OK;
}
