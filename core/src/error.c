/* Thread-local error record (message and where) and the lookups over the
 * status tables (core.h's and producer.h's). */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define TJ__ERROR_SIZE 2048

static _Thread_local char tj__error[TJ__ERROR_SIZE];
static _Thread_local tj_error_info tj__info = {0, -1, -1, TJ_PRODUCER_NONE};

const char *tj_last_error(void) { return tj__error; }

const tj_error_info *tj_last_error_info(void) { return &tj__info; }

int tj_set_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tj__error, sizeof(tj__error), fmt, ap);
  va_end(ap);
  tj__info.code = code;
  tj__info.argument = -1;
  tj__info.output = -1;
  tj__info.producer = TJ_PRODUCER_NONE;
  return code;
}

/* Appends `text` at *at, within the message buffer (truncating as snprintf). */
static void append(char **at, const char *text) {
  char *end = tj__error + sizeof(tj__error) - 1;
  while (*at < end && *text != '\0') *(*at)++ = *text++;
}

int tj__set_argument_error(int code, const char *kernel, int32_t argument, const char *name,
                           const char *what) {
  char digits[16], *d = digits + sizeof(digits) - 1;
  *d = '\0';
  uint32_t value = argument < 0 ? 0u - (uint32_t)argument : (uint32_t)argument;
  do *--d = (char)('0' + value % 10);
  while ((value /= 10) != 0);
  if (argument < 0) *--d = '-';
  char *at = tj__error;
  append(&at, kernel);
  append(&at, ": argument ");
  append(&at, d);
  append(&at, " '");
  append(&at, name);
  append(&at, "': ");
  append(&at, what);
  *at = '\0';
  tj__info.code = code;
  tj__info.argument = argument;
  tj__info.output = -1;
  tj__info.producer = TJ_PRODUCER_NONE;
  return code;
}

int tj_error_at(int code, int32_t argument, int32_t output, int32_t producer) {
  tj__info.code = code;
  if (argument >= 0) tj__info.argument = argument;
  if (output >= 0) tj__info.output = output;
  tj__info.producer = producer;
  return code;
}

int tj__prefix_error(int code, const char *fmt, ...) {
  char prefix[TJ__ERROR_SIZE / 2];
  char previous[TJ__ERROR_SIZE];
  tj_error_info info = tj__info;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  snprintf(previous, sizeof(previous), "%s", tj__error);
  tj_set_error(code, "%s%s", prefix, previous);
  tj__info = info;
  tj__info.code = code;
  return code;
}

const char *tj_status_name(int code) {
  switch (code) {
#define TJ__STATUS_NAME(name, value, exc) \
  case value: return #name;
    TJ_STATUS_MAP(TJ__STATUS_NAME)
    TJ_BINDING_STATUS_MAP(TJ__STATUS_NAME)
#undef TJ__STATUS_NAME
  }
  return "TJ_EUNKNOWN";
}

const char *tj_status_exception(int code) {
  switch (code) {
#define TJ__STATUS_EXC(name, value, exc) \
  case value: return exc;
    TJ_STATUS_MAP(TJ__STATUS_EXC)
    TJ_BINDING_STATUS_MAP(TJ__STATUS_EXC)
#undef TJ__STATUS_EXC
  }
  return "RuntimeError";
}
