/*
 * A host of C objects for the tests (and the fuzz target) of the binding layer
 * (tilejit/host.h): objects with reference counts, types, ints, floats,
 * strings, tuples, lists, functions and capsules, a pending error, and the
 * tj_host table over them. Every reference the core takes or makes is counted,
 * so tests can assert that each is given back.
 */
#ifndef TILEJIT_TESTS_FAKE_HOST_H_
#define TILEJIT_TESTS_FAKE_HOST_H_

#include <stdint.h>

#include "tilejit/host.h"

typedef enum {
  FH_TYPE = 1,
  FH_NONE,
  FH_BOOL,
  FH_INT,
  FH_FLOAT,
  FH_STR,
  FH_TUPLE,
  FH_LIST,
  FH_FUNC,
  FH_CAPSULE,
  FH_OBJECT, /* anything else: a tensor, a NumPy-like scalar (of its own type) */
} fh_kind;

#define FH_MAX_ITEMS 72

typedef struct fh_object fh_object;
struct fh_object {
  fh_object *type;
  int kind;
  int refs;
  int heap;     /* made by the host: freed when its last reference goes */
  long long i;  /* FH_INT, FH_BOOL: the value (or FH_OBJECT: what __index__ gives) */
  int overflow; /* FH_INT: beyond int64 (+1 / -1) */
  int fits_u64; /* FH_INT with overflow +1: the value fits uint64 (in u) */
  unsigned long long u;
  /* FH_INT made by fh_int: its value in both layouts tj_host.int_layout
   * states (a digit count, a tag; the first 30-bit digit). */
  intptr_t size_head;
  uintptr_t tag_head;
  uint32_t digit;
  double f;    /* FH_FLOAT (or FH_OBJECT: what __float__ gives) */
  char s[256]; /* FH_STR; FH_CAPSULE: its name */
  fh_object *items[FH_MAX_ITEMS];
  intptr_t n;
  fh_object *(*fn)(fh_object *args); /* FH_FUNC: a new reference, or NULL and an error */
  void *pointer;                     /* FH_CAPSULE's pointer; FH_TYPE: its tj_host_type;
                                        FH_OBJECT: what it holds (a tensor) */
};

/* The host's objects: None, True, False, and the types int, float, bool, str,
 * tuple, list, function, capsule; and the exception classes (types). */
extern fh_object fh_none, fh_true, fh_false;
extern fh_object fh_int_type, fh_float_type, fh_bool_type, fh_exception_types[TJ_HOST_NUM_STATUS];

/* The pending error: its class (a type) and message, or NULL. */
extern fh_object *fh_error_type;
extern fh_object *fh_error_value;

/* Fills `host` with the operations over these objects (hooks left NULL; ints
 * read through int64_of: int_layout -1). */
void fh_host(tj_host *host);

/* New objects (one reference, the caller's). */
fh_object *fh_int(long long value);
fh_object *fh_float(double value);
fh_object *fh_str(const char *text);
fh_object *fh_tuple(intptr_t n);
fh_object *fh_func(fh_object *(*fn)(fh_object *args));
/* A static type describing its objects as `info` (describe answers it). */
void fh_type_init(fh_object *type, const tj_host_type *info);
/* A static object of `type`. */
void fh_object_init(fh_object *object, fh_object *type);

/* tj_host.describe over these objects: describe(type, mode) answers the
 * tj_host_type the type was made with (fh_type_init), or raises for none. */
fh_object *fh_describe(fh_object *args);

/* Raises an error of class `type` (a new string value). */
void fh_raise(fh_object *type, const char *message);
/* Clears the pending error. */
void fh_clear(void);

/* Objects the host made that are still alive (0 once every reference is back). */
extern int fh_alive;

#endif /* TILEJIT_TESTS_FAKE_HOST_H_ */
