/*
 * Test runner: runs every test in test_list.h, or those named on the command
 * line, prints one line per test and ends with exactly "N passed, M failed"
 * (CI reads that line). Exit status 0 only if nothing failed.
 *
 *   build/tilejit_tests                      all tests
 *   build/tilejit_tests expr_symbols ...     the named tests
 *   build/tilejit_tests --list               the names, one per line
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define TJT__LISTED(name) const char tjt_listed_##name = 1;
TJT_TEST_LIST(TJT__LISTED)
#undef TJT__LISTED

typedef struct {
  const char *name;
  void (*fn)(void);
} test_entry;

static const test_entry tests[] = {
#define TJT__ENTRY(name) {#name, tjt_test_##name},
    TJT_TEST_LIST(TJT__ENTRY)
#undef TJT__ENTRY
};

#define NTESTS ((int)(sizeof(tests) / sizeof(tests[0])))

static jmp_buf abandon;

void tjt_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  printf("  %s:%d: ", file, line);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  longjmp(abandon, 1);
}

void tjt_note(const char *fmt, ...) {
  va_list ap;
  printf("  # ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

/* Runs one test; returns 1 if it passed. */
static int run(const test_entry *t) {
  /* Each test starts with no error left over from the previous one. */
  tj_set_error(TJ_OK, "%s", "");
  if (setjmp(abandon) == 0) {
    t->fn();
    printf("ok   %s\n", t->name);
    return 1;
  }
  printf("FAIL %s\n", t->name);
  return 0;
}

int main(int argc, char **argv) {
  /* Line-buffered, so failure details and sanitizer reports (stderr) stay in
   * order with the test lines even when piped. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < NTESTS; ++i) printf("%s\n", tests[i].name);
    return 0;
  }
  int passed = 0, failed = 0;
  if (argc < 2) {
    for (int i = 0; i < NTESTS; ++i) run(&tests[i]) ? ++passed : ++failed;
  } else {
    for (int a = 1; a < argc; ++a) {
      int found = 0;
      for (int i = 0; i < NTESTS; ++i) {
        if (strcmp(argv[a], tests[i].name) == 0) {
          found = 1;
          run(&tests[i]) ? ++passed : ++failed;
        }
      }
      if (!found) {
        printf("FAIL %s (no such test)\n", argv[a]);
        ++failed;
      }
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
