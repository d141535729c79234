/*
 * Call arguments: importing legacy and versioned managed tensors, and the
 * DLPack ownership rule that the deleter runs exactly once, whatever path
 * the import takes.
 */
#include "builders.h"

/* A managed tensor whose deleter counts its calls in a counter reached
 * through manager_ctx. */
typedef struct {
  int deletes;
  int64_t shape[2];
  int64_t strides[2];
} counter;

static void count_legacy(DLManagedTensor *self) { ++((counter *)self->manager_ctx)->deletes; }

static void count_versioned(DLManagedTensorVersioned *self) {
  ++((counter *)self->manager_ctx)->deletes;
}

static DLTensor sample_tensor(counter *c) {
  c->shape[0] = 3;
  c->shape[1] = 4;
  c->strides[0] = 4;
  c->strides[1] = 1;
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = tjt_data;
  t.device.device_type = kDLCPU;
  t.ndim = 2;
  t.dtype = TJT_F32;
  t.shape = c->shape;
  t.strides = c->strides;
  t.byte_offset = 16;
  return t;
}

static void init_versioned(DLManagedTensorVersioned *m, counter *c, uint32_t major, uint32_t minor,
                           uint64_t flags) {
  memset(m, 0, sizeof(*m));
  m->version.major = major;
  m->version.minor = minor;
  m->manager_ctx = c;
  m->deleter = count_versioned;
  m->flags = flags;
  m->dl_tensor = sample_tensor(c);
}

static void check_sample(const tj_arg *arg, const counter *c) {
  CHECK_EQ_INT(arg->kind, TJ_ARG_TENSOR);
  CHECK(arg->tensor.data == tjt_data);
  CHECK_EQ_INT(arg->tensor.ndim, 2);
  CHECK_EQ_INT(arg->tensor.byte_offset, 16);
  CHECK_EQ_INT(arg->tensor.dtype.code, kDLFloat);
  CHECK_EQ_INT(arg->tensor.dtype.bits, 32);
  /* shape and strides are borrowed from the producer, not copied */
  CHECK(arg->tensor.shape == c->shape);
  CHECK(arg->tensor.strides == c->strides);
}

TEST(arg_init_is_none) {
  tj_arg arg;
  memset(&arg, 0xab, sizeof(arg));
  tj_arg_init(&arg);
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);
  CHECK_EQ_INT(arg.flags, 0);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);
  CHECK(arg.owner == NULL);
  CHECK(arg.type_name == NULL);
  tj_arg_release(&arg); /* nothing owed: a no-op */
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);
}

TEST(arg_legacy_import) {
  counter c = {0};
  DLManagedTensor m;
  memset(&m, 0, sizeof(m));
  m.dl_tensor = sample_tensor(&c);
  m.manager_ctx = &c;
  m.deleter = count_legacy;

  tj_arg arg;
  tj_arg_from_legacy(&arg, &m);
  check_sample(&arg, &c);
  CHECK_EQ_INT(arg.flags, 0);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_LEGACY);
  CHECK(arg.owner == &m);
  CHECK_EQ_INT(c.deletes, 0);

  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);
}

TEST(arg_legacy_null_deleter) {
  counter c = {0};
  DLManagedTensor m;
  memset(&m, 0, sizeof(m));
  m.dl_tensor = sample_tensor(&c);
  tj_arg arg;
  tj_arg_from_legacy(&arg, &m);
  tj_arg_release(&arg);
  tj_arg_release(&arg);
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);

  DLManagedTensorVersioned v;
  init_versioned(&v, &c, 1, 0, 0);
  v.deleter = NULL;
  CHECK_OK(tj_arg_from_versioned(&arg, &v, "argument 0 'A'"));
  tj_arg_release(&arg);
  v.version.major = 2; /* rejected, and still no deleter to call */
  CHECK_STATUS(tj_arg_from_versioned(&arg, &v, "argument 0 'A'"), TJ_EVALUE);
  CHECK_EQ_INT(c.deletes, 0);
}

TEST(arg_versioned_import) {
  counter c = {0};
  DLManagedTensorVersioned m;
  init_versioned(&m, &c, TJ_DLPACK_MAJOR, TJ_DLPACK_MINOR, 0);
  tj_arg arg;
  CHECK_OK(tj_arg_from_versioned(&arg, &m, "argument 0 'A'"));
  check_sample(&arg, &c);
  CHECK_EQ_INT(arg.flags & TJ_ARG_READ_ONLY, 0);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_VERSIONED);
  CHECK(arg.owner == &m);
  CHECK_EQ_INT(c.deletes, 0);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);
}

TEST(arg_versioned_newer_minor) {
  /* Minor versions only add; 1.x for any x is readable. */
  counter c = {0};
  DLManagedTensorVersioned m;
  init_versioned(&m, &c, 1, 99, 0);
  tj_arg arg;
  CHECK_OK(tj_arg_from_versioned(&arg, &m, NULL));
  check_sample(&arg, &c);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);
}

TEST(arg_versioned_read_only) {
  counter c = {0};
  DLManagedTensorVersioned m;
  init_versioned(&m, &c, 1, 3, DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED);
  tj_arg arg;
  CHECK_OK(tj_arg_from_versioned(&arg, &m, NULL));
  CHECK_EQ_INT(arg.flags & TJ_ARG_READ_ONLY, TJ_ARG_READ_ONLY);
  tj_arg_release(&arg);
  CHECK_EQ_INT(arg.flags, 0);
  CHECK_EQ_INT(c.deletes, 1);

  /* Other flags do not make it read-only. */
  init_versioned(&m, &c, 1, 3, DLPACK_FLAG_BITMASK_IS_COPIED);
  CHECK_OK(tj_arg_from_versioned(&arg, &m, NULL));
  CHECK_EQ_INT(arg.flags & TJ_ARG_READ_ONLY, 0);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 2);
}

TEST(arg_versioned_major_rejected) {
  counter c = {0};
  DLManagedTensorVersioned m;
  init_versioned(&m, &c, 2, 0, 0);
  /* Past version/flags the layout of a 2.x tensor is unknown: poison it to
   * show the import reads nothing there. */
  memset(&m.dl_tensor, 0xff, sizeof(m.dl_tensor));
  tj_arg arg;
  CHECK_STATUS(tj_arg_from_versioned(&arg, &m, "argument 1 'B'"), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 1 'B'");
  CHECK_ERROR_CONTAINS("2.0");
  CHECK_EQ_INT(c.deletes, 1);
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);
  /* The deleter already ran: a later release must not run it again. */
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 1);

  init_versioned(&m, &c, 0, 8, 0);
  CHECK_STATUS(tj_arg_from_versioned(&arg, &m, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("0.8");
  CHECK_EQ_INT(c.deletes, 2);
  tj_arg_release(&arg);
  CHECK_EQ_INT(c.deletes, 2);
}

TEST(arg_from_dltensor) {
  counter c = {0};
  DLTensor t = sample_tensor(&c);
  tj_arg arg;
  tj_arg_from_dltensor(&arg, &t, TJ_ARG_READ_ONLY);
  check_sample(&arg, &c);
  CHECK_EQ_INT(arg.flags, TJ_ARG_READ_ONLY);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);
  CHECK(arg.owner == NULL);
  /* Copied by value: later changes to the caller's struct do not show. */
  t.byte_offset = 0;
  CHECK_EQ_INT(arg.tensor.byte_offset, 16);
  tj_arg_release(&arg);
  CHECK_EQ_INT(arg.kind, TJ_ARG_NONE);
}
