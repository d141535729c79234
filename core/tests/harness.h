/*
 * A small test harness in the libuv manner: plain C, an explicit test list
 * (test_list.h), one function per test.
 *
 *   TEST(expr_floor_semantics) {
 *     CHECK_EQ_INT(eval2(TJ_OP_FLOORDIV, -7, 2), -4);
 *   }
 *
 * A failing CHECK prints file, line and what differed, then abandons the test
 * (longjmp back to the runner); anything the test allocated is leaked, which
 * is fine because the run already failed. CHECKs may be used from helper
 * functions, but only on the main thread: worker threads count their own
 * failures and the test CHECKs the count after joining them.
 */
#ifndef TILEJIT_TESTS_HARNESS_H_
#define TILEJIT_TESTS_HARNESS_H_

#include <stdint.h>
#include <string.h>

#include "test_list.h"
#include "tilejit/tilejit.h"

/* Every listed test, declared from the list so a typo in either place is a
 * compile error. */
#define TJT__DECLARE(name) void tjt_test_##name(void);
TJT_TEST_LIST(TJT__DECLARE)
#undef TJT__DECLARE

/* Defines a test. The reference to tjt_listed_<name> (defined by main.c for
 * each listed name) makes an unlisted test fail to link. */
#define TEST(name)                                                \
  extern const char tjt_listed_##name;                            \
  const char *const tjt_check_listed_##name = &tjt_listed_##name; \
  void tjt_test_##name(void)

/* Reports a failure and abandons the current test. Never returns. */
void tjt_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

/* Prints an informational line under the current test ("# ..."). */
void tjt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                \
  do {                                                             \
    if (!(cond)) tjt_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                        \
  do {                                                                                            \
    long long tjt_a_ = (long long)(a), tjt_b_ = (long long)(b);                                   \
    if (tjt_a_ != tjt_b_)                                                                         \
      tjt_fail(__FILE__, __LINE__, "CHECK_EQ_INT(%s, %s): %lld != %lld", #a, #b, tjt_a_, tjt_b_); \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                \
  do {                                                                                    \
    const char *tjt_a_ = (a), *tjt_b_ = (b);                                              \
    if (tjt_a_ == NULL || tjt_b_ == NULL || strcmp(tjt_a_, tjt_b_) != 0)                  \
      tjt_fail(__FILE__, __LINE__,                                                        \
               "CHECK_EQ_STR(%s, %s):\n    got      \"%s\"\n    expected \"%s\"", #a, #b, \
               tjt_a_ ? tjt_a_ : "(null)", tjt_b_ ? tjt_b_ : "(null)");                   \
  } while (0)

/* Evaluates a tj_ call and checks its status; on mismatch prints both codes
 * and the thread's error message. */
#define CHECK_STATUS(expr, code)                                                                \
  do {                                                                                          \
    int tjt_got_ = (expr), tjt_want_ = (code);                                                  \
    if (tjt_got_ != tjt_want_)                                                                  \
      tjt_fail(__FILE__, __LINE__, "CHECK_STATUS(%s): got %s, expected %s; last error: \"%s\"", \
               #expr, tj_status_name(tjt_got_), tj_status_name(tjt_want_), tj_last_error());    \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, TJ_OK)

/* The thread's last error message contains `substr`. */
#define CHECK_ERROR_CONTAINS(substr)                                                          \
  do {                                                                                        \
    const char *tjt_err_ = tj_last_error(), *tjt_sub_ = (substr);                             \
    if (strstr(tjt_err_, tjt_sub_) == NULL)                                                   \
      tjt_fail(__FILE__, __LINE__, "CHECK_ERROR_CONTAINS(%s): \"%s\" not in \"%s\"", #substr, \
               tjt_sub_, tjt_err_);                                                           \
  } while (0)

/* The thread's last error message starts with `prefix`. */
#define CHECK_ERROR_STARTS_WITH(prefix)                              \
  do {                                                               \
    const char *tjt_err_ = tj_last_error(), *tjt_pre_ = (prefix);    \
    if (strncmp(tjt_err_, tjt_pre_, strlen(tjt_pre_)) != 0)          \
      tjt_fail(__FILE__, __LINE__,                                   \
               "CHECK_ERROR_STARTS_WITH(%s): \"%s\" does not start " \
               "with \"%s\"",                                        \
               #prefix, tjt_err_, tjt_pre_);                         \
  } while (0)

#endif /* TILEJIT_TESTS_HARNESS_H_ */
