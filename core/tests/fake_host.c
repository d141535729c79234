/*
 * The fake host of fake_host.h. Each function does what the CPython function
 * the tj_host field names does, over fh_object records.
 */
#include "fake_host.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fh_object type_type = {.kind = FH_TYPE, .refs = 1};
fh_object fh_int_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
fh_object fh_float_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
fh_object fh_bool_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
static fh_object none_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
static fh_object str_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
static fh_object tuple_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
static fh_object list_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
static fh_object func_type = {.type = &type_type, .kind = FH_TYPE, .refs = 1};
fh_object fh_exception_types[TJ_HOST_NUM_STATUS];
fh_object fh_none = {.type = &none_type, .kind = FH_NONE, .refs = 1};
fh_object fh_true = {.type = &fh_bool_type, .kind = FH_BOOL, .refs = 1, .i = 1};
fh_object fh_false = {.type = &fh_bool_type, .kind = FH_BOOL, .refs = 1, .i = 0};
fh_object *fh_error_type, *fh_error_value;
int fh_alive;

static fh_object *make(fh_object *type, int kind) {
  fh_object *o = calloc(1, sizeof(*o));
  if (o == NULL) abort();
  o->type = type;
  o->kind = kind;
  o->refs = 1;
  o->heap = 1;
  fh_alive++;
  return o;
}

static void retain(void *object) { ((fh_object *)object)->refs++; }

static void release(void *object) {
  fh_object *o = object;
  if (--o->refs > 0 || !o->heap) return;
  if (o->refs < 0) abort(); /* a reference given back twice */
  if (o->kind == FH_TUPLE || o->kind == FH_LIST)
    for (intptr_t i = 0; i < o->n; ++i)
      if (o->items[i] != NULL) release(o->items[i]);
  fh_alive--;
  free(o);
}

fh_object *fh_int(long long value) {
  fh_object *o = make(&fh_int_type, FH_INT);
  o->i = value;
  /* As CPython keeps it: 30-bit digits, the count signed (3.11) or in a tag
   * above the sign bits (3.12). */
  unsigned long long magnitude =
      value < 0 ? 0ull - (unsigned long long)value : (unsigned long long)value;
  intptr_t digits = 0;
  for (unsigned long long m = magnitude; m != 0; m >>= 30) ++digits;
  o->size_head = value < 0 ? -digits : digits;
  o->tag_head = (uintptr_t)digits << 3 | (value < 0 ? 2u : value == 0 ? 1u : 0u);
  o->digit = (uint32_t)(magnitude & ((1u << 30) - 1));
  return o;
}

fh_object *fh_float(double value) {
  fh_object *o = make(&fh_float_type, FH_FLOAT);
  o->f = value;
  return o;
}

fh_object *fh_str(const char *text) {
  fh_object *o = make(&str_type, FH_STR);
  snprintf(o->s, sizeof(o->s), "%s", text);
  return o;
}

fh_object *fh_tuple(intptr_t n) {
  if (n > FH_MAX_ITEMS) abort();
  fh_object *o = make(&tuple_type, FH_TUPLE);
  o->n = n;
  return o;
}

fh_object *fh_func(fh_object *(*fn)(fh_object *args)) {
  fh_object *o = make(&func_type, FH_FUNC);
  o->fn = fn;
  return o;
}

void fh_type_init(fh_object *type, const tj_host_type *info) {
  memset(type, 0, sizeof(*type));
  type->type = &type_type;
  type->kind = FH_TYPE;
  type->refs = 1;
  type->pointer = (void *)info;
}

void fh_object_init(fh_object *object, fh_object *type) {
  memset(object, 0, sizeof(*object));
  object->type = type;
  object->kind = FH_OBJECT;
  object->refs = 1;
}

void fh_clear(void) {
  if (fh_error_value != NULL) release(fh_error_value);
  fh_error_type = fh_error_value = NULL;
}

void fh_raise(fh_object *type, const char *message) {
  fh_clear();
  fh_error_type = type;
  fh_error_value = fh_str(message);
  fh_error_value->type = type;
}

fh_object *fh_describe(fh_object *args) {
  fh_object *type = args->items[0];
  if (type->pointer == NULL) {
    fh_raise(&fh_exception_types[1], "no description");
    return NULL;
  }
  return fh_int((long long)(intptr_t)type->pointer);
}

/* ---- The table ------------------------------------------------------------------ */

static int capsule_is_valid(void *capsule, const char *name) {
  fh_object *o = capsule;
  return o->kind == FH_CAPSULE && strcmp(o->s, name) == 0;
}

static void *capsule_pointer(void *capsule, const char *name) {
  if (!capsule_is_valid(capsule, name)) {
    fh_raise(&fh_exception_types[2], "not a capsule of that name");
    return NULL;
  }
  return ((fh_object *)capsule)->pointer;
}

static int capsule_set_name(void *capsule, const char *name) {
  snprintf(((fh_object *)capsule)->s, sizeof(((fh_object *)capsule)->s), "%s", name);
  return 0;
}

static void *object_type(void *object) {
  retain(((fh_object *)object)->type);
  return ((fh_object *)object)->type;
}

static intptr_t sequence_size(void *sequence) { return ((fh_object *)sequence)->n; }

static void *sequence_item(void *sequence, intptr_t i) {
  fh_object *o = sequence;
  if (i < 0 || i >= o->n) {
    fh_raise(&fh_exception_types[2], "index out of range");
    return NULL;
  }
  return o->items[i];
}

static void *tuple_new(intptr_t n) { return fh_tuple(n); }

static int item_set(void *sequence, intptr_t i, void *item) {
  fh_object *o = sequence;
  if (o->items[i] != NULL) release(o->items[i]);
  o->items[i] = item;
  return 0;
}

static void *list_new(intptr_t n) {
  fh_object *o = fh_tuple(n);
  o->type = &list_type;
  o->kind = FH_LIST;
  return o;
}

static long long int64_of(void *object, int *overflow) {
  fh_object *o = object;
  *overflow = o->kind == FH_INT ? o->overflow : 0;
  if (o->kind != FH_INT && o->kind != FH_BOOL) {
    fh_raise(&fh_exception_types[1], "an integer is required");
    return -1;
  }
  return o->overflow ? -1 : o->i;
}

static unsigned long long uint64_of(void *object) {
  fh_object *o = object;
  if (o->kind == FH_INT && o->overflow > 0) {
    if (o->fits_u64) return o->u;
    fh_raise(&fh_exception_types[2], "int too big to convert");
    return (unsigned long long)-1;
  }
  if (o->kind != FH_INT || o->i < 0) {
    fh_raise(&fh_exception_types[2], "can't convert to unsigned");
    return (unsigned long long)-1;
  }
  return (unsigned long long)o->i;
}

static double double_of(void *object) {
  fh_object *o = object;
  if (o->kind == FH_FLOAT || o->kind == FH_OBJECT) return o->f;
  if (o->kind == FH_INT && o->overflow == 0) return (double)o->i;
  if (o->kind == FH_INT && o->fits_u64) return (double)o->u;
  fh_raise(&fh_exception_types[2],
           o->kind == FH_INT ? "int too large to convert to float" : "must be real number");
  return -1.0;
}

static void *index_of(void *object) { return fh_int(((fh_object *)object)->i); }

static int truth(void *object) {
  fh_object *o = object;
  return o->kind == FH_NONE ? 0 : o->i != 0 || o->f != 0;
}

static void *int_new(long long value) { return fh_int(value); }

static void *string_new(const char *text) { return fh_str(text); }

static int string_compare(void *string, const char *ascii) {
  return strcmp(((fh_object *)string)->s, ascii);
}

static void *attribute(void *object, const char *name) {
  fh_object *o = object;
  /* A pointer object: its address in i, its dtype (float32) and its device (cpu). */
  if (strcmp(name, "address") == 0) return fh_int(o->i);
  if (strcmp(name, "dlpack_device_type") == 0) return fh_int(1);
  if (strcmp(name, "dlpack_dtype") == 0) {
    fh_object *t = fh_tuple(3);
    t->items[0] = fh_int(2);
    t->items[1] = fh_int(32);
    t->items[2] = fh_int(1);
    return t;
  }
  fh_raise(&fh_exception_types[2], "no such attribute");
  return NULL;
}

static void *call(void *callable, void *args) {
  fh_object *f = callable;
  if (f == NULL || f->kind != FH_FUNC) {
    fh_raise(&fh_exception_types[1], "not callable");
    return NULL;
  }
  return f->fn(args);
}

static void *error_pending(void) { return fh_error_type; }

static void error_fetch(void **type, void **value, void **traceback) {
  *type = fh_error_type;
  *value = fh_error_value;
  *traceback = NULL;
  if (fh_error_type != NULL) retain(fh_error_type);
  fh_error_type = fh_error_value = NULL;
}

static void error_normalize(void **type, void **value, void **traceback) {
  (void)type, (void)value, (void)traceback;
}

static void error_set(void *type, const char *message) { fh_raise(type, message); }

static void error_set_object(void *type, void *value) {
  fh_clear();
  retain(value);
  fh_error_type = type;
  fh_error_value = value;
}

static void exception_set_cause(void *exception, void *cause) {
  (void)exception;
  release(cause);
}

static void error_restore(void *type, void *value, void *traceback) {
  (void)traceback;
  fh_clear();
  fh_error_type = type;
  fh_error_value = value;          /* stolen */
  if (type != NULL) release(type); /* the reference error_fetch gave */
}

/* The fake host has no dicts: no item is ever found. */
static void *dict_item(void *dict, void *key) {
  (void)dict, (void)key;
  return NULL;
}

void fh_host(tj_host *host) {
  memset(host, 0, sizeof(*host));
  for (int i = 0; i < TJ_HOST_NUM_STATUS; ++i) {
    fh_exception_types[i].type = &type_type;
    fh_exception_types[i].kind = FH_TYPE;
    fh_exception_types[i].refs = 1;
    host->exceptions[i] = &fh_exception_types[i];
  }
  host->capsule_is_valid = capsule_is_valid;
  host->capsule_pointer = capsule_pointer;
  host->capsule_set_name = capsule_set_name;
  host->object_type = object_type;
  host->release = release;
  host->type_offset = (intptr_t)offsetof(fh_object, type);
  host->float_value_offset = (intptr_t)offsetof(fh_object, f);
  host->int_layout = -1;
  host->int_head_offset = (intptr_t)offsetof(fh_object, tag_head);
  host->int_digit_offset = (intptr_t)offsetof(fh_object, digit);
  host->sequence_size = sequence_size;
  host->sequence_item = sequence_item;
  host->tuple_new = tuple_new;
  host->tuple_set = item_set;
  host->retain = retain;
  host->list_new = list_new;
  host->list_set = item_set;
  host->int64_of = int64_of;
  host->uint64_of = uint64_of;
  host->double_of = double_of;
  host->index_of = index_of;
  host->truth = truth;
  host->int_new = int_new;
  host->string_new = string_new;
  host->string_compare = string_compare;
  host->attribute = attribute;
  host->call = call;
  host->error_pending = error_pending;
  host->error_clear = fh_clear;
  host->error_fetch = error_fetch;
  host->error_normalize = error_normalize;
  host->error_set = error_set;
  host->error_set_object = error_set_object;
  host->exception_set_cause = exception_set_cause;
  host->error_restore = error_restore;
  host->dict_item = dict_item;
  host->none = &fh_none;
  host->true_object = &fh_true;
  host->int_type = &fh_int_type;
  host->float_type = &fh_float_type;
  host->bool_type = &fh_bool_type;
}
