/* Kernels as built: signatures, consistency checks, loading the CPU library
 * or the CUDA module image, and the CUDA launch configuration. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "memo.h"
#include "target_cuda.h"

static char *copy_string(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *out = malloc(n);
  if (out) memcpy(out, s ? s : "", n);
  return out;
}

int tj_kernel_create(const char *name, int32_t nparams, int32_t target, tj_kernel **out) {
  TJ__REFUSE_NULL("tj_kernel_create", out);
  *out = NULL;
  if (nparams < 0 || nparams > TJ_MAX_PARAMS)
    return tj_set_error(TJ_EVALUE, "%s: %d parameters (at most %d supported)", name, nparams,
                        TJ_MAX_PARAMS);
  if (target != TJ_TARGET_CPU && target != TJ_TARGET_CUDA)
    return tj_set_error(TJ_EVALUE, "%s: unknown target %d", name, target);
  tj_kernel *k = calloc(1, sizeof(*k));
  if (k == NULL || (k->name = copy_string(name)) == NULL) {
    free(k);
    return tj_set_error(TJ_ENOMEM, "out of memory");
  }
  k->nparams = nparams;
  k->target = target;
  k->nlaunches = 1; /* launch 0 is completed at finalize */
  *out = k;
  return TJ_OK;
}

void tj_kernel_free(tj_kernel *k) {
  if (k == NULL) return;
  for (int32_t i = 0; i < k->nparams; ++i) free(k->params[i].name);
  for (int32_t i = 0; i < k->nsymbols; ++i) free(k->symbol_names[i]);
  for (int32_t i = 0; i < k->nexprs; ++i) {
    free(k->exprs[i].code);
    free(k->exprs[i].text);
  }
  free(k->exprs);
  if (k->library) dlclose(k->library);
  if (k->kernel_library) dlclose(k->kernel_library);
  tj__cuda_free(k);
  tj__memo_free(k);
  if (k->opened_free) k->opened_free(k->opened);
  free(k->image);
  free(k->image_symbol);
  for (int32_t i = 1; i < k->nlaunches; ++i) {
    free(k->launches[i].symbol);
    free(k->launches[i].abi);
  }
  for (int32_t i = 0; i < k->ntensormaps; ++i) free((char *)k->tensormaps[i].name);
  free(k->name);
  free(k);
}

static int check_mutable(const tj_kernel *k) {
  TJ__REFUSE_NULL("tj_kernel", k);
  if (k->finalized)
    return tj_set_error(TJ_EVALUE, "%s: the kernel is finalized and cannot change", k->name);
  return TJ_OK;
}

int tj_kernel_add_symbol(tj_kernel *k, const char *name, int64_t divisibility) {
  int rc = check_mutable(k);
  if (rc) return rc;
  if (k->nsymbols == TJ_MAX_SYMBOLS)
    return tj_set_error(TJ_EVALUE, "%s: more than %d symbols", k->name, TJ_MAX_SYMBOLS);
  if (divisibility < 1)
    return tj_set_error(TJ_EVALUE, "%s: symbol '%s': divisibility must be >= 1, got %lld", k->name,
                        name, (long long)divisibility);
  if ((k->symbol_names[k->nsymbols] = copy_string(name)) == NULL)
    return tj_set_error(TJ_ENOMEM, "out of memory");
  k->symbol_dtype[k->nsymbols] = (DLDataType){kDLInt, 64, 1};
  k->symbol_div[k->nsymbols++] = divisibility;
  return TJ_OK;
}

static int is_index_dtype(DLDataType t) {
  return (t.code == kDLInt || t.code == kDLUInt) && (t.bits == 32 || t.bits == 64) && t.lanes == 1;
}

int tj_kernel_set_symbol_dtype(tj_kernel *k, int32_t symbol, DLDataType dtype) {
  int rc = check_mutable(k);
  if (rc) return rc;
  if (symbol < 0 || symbol >= k->nsymbols)
    return tj_set_error(TJ_EVALUE, "%s: no symbol %d (the kernel has %d)", k->name, symbol,
                        k->nsymbols);
  if (!is_index_dtype(dtype))
    return tj_set_error(TJ_EVALUE,
                        "%s: symbol '%s': dtype must be int32, int64, uint32 or uint64, got "
                        "code %d bits %d lanes %d",
                        k->name, k->symbol_names[symbol], dtype.code, dtype.bits, dtype.lanes);
  k->symbol_dtype[symbol] = dtype;
  return TJ_OK;
}

/* Checks `n` kernel arguments against what the kernel declares so far. */
static int check_abi(const tj_kernel *k, int32_t n, const tj_abi_arg *args) {
  if (n < 0 || n > TJ_MAX_ABI_ARGS)
    return tj_set_error(TJ_EVALUE, "%s: %d kernel arguments, expected 0 to %d", k->name, n,
                        TJ_MAX_ABI_ARGS);
  for (int32_t a = 0; a < n; ++a) {
    const tj_abi_arg *e = &args[a];
    int32_t count = e->source == TJ_ABI_PARAM       ? k->nparams
                    : e->source == TJ_ABI_SYMBOL    ? k->nsymbols
                    : e->source == TJ_ABI_EXPR      ? k->nexprs
                    : e->source == TJ_ABI_TENSORMAP ? k->ntensormaps
                                                    : -1;
    if (count < 0)
      return tj_set_error(TJ_EVALUE, "%s: kernel argument %d: unknown source %d", k->name, a,
                          e->source);
    if (e->index < 0 || e->index >= count)
      return tj_set_error(TJ_EVALUE, "%s: kernel argument %d: index %d out of range (%d)", k->name,
                          a, e->index, count);
    if (e->source == TJ_ABI_EXPR && !is_index_dtype(e->dtype))
      return tj_set_error(TJ_EVALUE,
                          "%s: kernel argument %d: an expression is passed as int32, int64, "
                          "uint32 or uint64",
                          k->name, a);
  }
  return TJ_OK;
}

int tj_kernel_set_abi(tj_kernel *k, int32_t n, const tj_abi_arg *args) {
  int rc = check_mutable(k);
  if (rc || (rc = check_abi(k, n, args))) return rc;
  if (n > 0) memcpy(k->abi, args, sizeof(*args) * (size_t)n);
  k->nabi = n;
  k->has_abi = 1;
  return TJ_OK;
}

int tj_kernel_add_expr(tj_kernel *k, const int64_t *code, int32_t n, const char *text,
                       int32_t *out_id) {
  int rc = check_mutable(k);
  if (rc) return rc;
  if (n < 1) return tj_set_error(TJ_EVALUE, "%s: empty expression", k->name);
  /* Reject malformed programs now, so evaluation at call time cannot fail
   * for any reason but the values (division by zero). */
  int32_t depth = 0;
  for (int32_t i = 0; i < n; ++i) {
    int64_t op = code[2 * i], operand = code[2 * i + 1];
    if (op == TJ_OP_CONST) {
      ++depth;
    } else if (op == TJ_OP_SYM) {
      if (operand < 0 || operand >= k->nsymbols)
        return tj_set_error(TJ_EVALUE, "%s: expression '%s' uses undeclared symbol #%lld", k->name,
                            text, (long long)operand);
      ++depth;
    } else if (op == TJ_OP_NEG) {
      if (depth < 1) depth = -100;
    } else if (op >= TJ_OP_ADD && op <= TJ_OP_MAX) {
      --depth;
    } else {
      return tj_set_error(TJ_EVALUE, "%s: expression '%s' has unknown op %lld", k->name, text,
                          (long long)op);
    }
    if (depth < 1 || depth > TJ_MAX_EXPR_STACK)
      return tj_set_error(TJ_EVALUE, "%s: malformed expression '%s'", k->name, text);
  }
  if (depth != 1) return tj_set_error(TJ_EVALUE, "%s: malformed expression '%s'", k->name, text);
  if (k->nexprs == k->cap_exprs) {
    int32_t cap = k->cap_exprs ? 2 * k->cap_exprs : 16;
    tj__expr *grown = realloc(k->exprs, (size_t)cap * sizeof(*grown));
    if (grown == NULL) return tj_set_error(TJ_ENOMEM, "out of memory");
    k->exprs = grown;
    k->cap_exprs = cap;
  }
  tj__expr *e = &k->exprs[k->nexprs];
  memset(e, 0, sizeof(*e));
  e->code = malloc((size_t)n * 2 * sizeof(int64_t));
  e->text = copy_string(text);
  if (e->code == NULL || e->text == NULL) {
    free(e->code);
    free(e->text);
    return tj_set_error(TJ_ENOMEM, "out of memory");
  }
  memcpy(e->code, code, (size_t)n * 2 * sizeof(int64_t));
  e->n = n;
  e->sym = (n == 1 && code[0] == TJ_OP_SYM) ? (int32_t)code[1] : -1;
  e->is_const = n == 1 && code[0] == TJ_OP_CONST;
  e->cval = e->is_const ? code[1] : 0;
  *out_id = k->nexprs++;
  return TJ_OK;
}

static int set_param(tj_kernel *k, int32_t index, const char *name, int32_t kind, tj__param **out) {
  int rc = check_mutable(k);
  if (rc) return rc;
  if (index < 0 || index >= k->nparams)
    return tj_set_error(TJ_EVALUE, "%s: parameter index %d out of range [0, %d)", k->name, index,
                        k->nparams);
  tj__param *p = &k->params[index];
  if (p->kind) return tj_set_error(TJ_EVALUE, "%s: parameter %d declared twice", k->name, index);
  memset(p, 0, sizeof(*p));
  if ((p->name = copy_string(name)) == NULL) return tj_set_error(TJ_ENOMEM, "out of memory");
  p->kind = kind;
  p->position = -1;
  p->output = -1;
  p->binds = -1;
  *out = p;
  return TJ_OK;
}

/* `what` labels the ids in the message: "parameter 'A'", "launch configuration". */
static int check_expr_ids(const tj_kernel *k, const char *what, const int32_t *ids, int32_t n) {
  for (int32_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= k->nexprs)
      return tj_set_error(TJ_EVALUE, "%s: %s: unknown expression id %d", k->name, what, ids[i]);
  return TJ_OK;
}

int tj_kernel_set_buffer(tj_kernel *k, int32_t index, const char *name, DLDataType dtype,
                         int32_t ndim, const int32_t *shape_ids, const int32_t *stride_ids,
                         int64_t align, uint32_t flags) {
  TJ__REFUSE_NULL("tj_kernel_set_buffer", k);
  if (ndim < 0 || ndim > TJ_MAX_NDIM)
    return tj_set_error(TJ_EVALUE, "%s: parameter '%s': ndim %d out of range [0, %d]", k->name,
                        name, ndim, TJ_MAX_NDIM);
  if (align < 0 || (align & (align - 1)))
    return tj_set_error(TJ_EVALUE, "%s: parameter '%s': align must be a power of two, got %lld",
                        k->name, name, (long long)align);
  if ((flags & TJ_BUF_ZERO) && !(flags & TJ_BUF_WORKSPACE))
    return tj_set_error(TJ_EVALUE, "%s: parameter '%s': only a workspace is zero-filled", k->name,
                        name);
  char what[300];
  snprintf(what, sizeof(what), "parameter '%s'", name);
  int rc = check_expr_ids(k, what, shape_ids, ndim);
  if (!rc && stride_ids) rc = check_expr_ids(k, what, stride_ids, ndim);
  tj__param *p;
  if (rc || (rc = set_param(k, index, name, TJ_PARAM_BUFFER, &p))) return rc;
  p->dtype = dtype;
  p->ndim = ndim;
  /* Default: the element size, or its largest power-of-two divisor (12-byte int32x3). */
  int64_t bytes = tj__dtype_bytes(dtype);
  p->align = align ? align : (bytes & -bytes);
  p->declared_align = align;
  p->flags = flags;
  for (int32_t d = 0; d < ndim; ++d) {
    p->shape[d] = shape_ids[d];
    const tj__expr *e = &k->exprs[shape_ids[d]];
    if (e->sym < 0 && !e->is_const) p->has_complex = 1;
    if (stride_ids) {
      p->strides[d] = stride_ids[d];
      e = &k->exprs[stride_ids[d]];
      if (e->sym < 0 && !e->is_const) p->has_complex = 1;
    }
  }
  p->has_strides = stride_ids != NULL;
  return TJ_OK;
}

int tj_kernel_set_scalar(tj_kernel *k, int32_t index, const char *name, DLDataType dtype) {
  TJ__REFUSE_NULL("tj_kernel_set_scalar", k);
  int int_bits = dtype.bits == 8 || dtype.bits == 16 || dtype.bits == 32 || dtype.bits == 64;
  int ok =
      dtype.lanes == 1 && (((dtype.code == kDLInt || dtype.code == kDLUInt) && int_bits) ||
                           (dtype.code == kDLFloat && (dtype.bits == 32 || dtype.bits == 64)) ||
                           (dtype.code == kDLBool && dtype.bits == 8));
  if (!ok) {
    char dt[48];
    tj_dtype_format(dtype, dt, sizeof(dt));
    return tj_set_error(TJ_EVALUE,
                        "%s: scalar parameter '%s': dtype %s is not supported (int, uint, "
                        "float32, float64, bool)",
                        k->name, name, dt);
  }
  tj__param *p;
  int rc = set_param(k, index, name, TJ_PARAM_SCALAR, &p);
  if (rc) return rc;
  p->dtype = dtype;
  return TJ_OK;
}

int tj_kernel_set_scalar_symbol(tj_kernel *k, int32_t index, int32_t symbol) {
  int rc = check_mutable(k);
  if (rc) return rc;
  if (index < 0 || index >= k->nparams || k->params[index].kind != TJ_PARAM_SCALAR)
    return tj_set_error(TJ_EVALUE, "%s: parameter %d is not a declared scalar", k->name, index);
  tj__param *p = &k->params[index];
  if (p->dtype.code != kDLInt && p->dtype.code != kDLUInt) {
    char dt[48];
    tj_dtype_format(p->dtype, dt, sizeof(dt));
    return tj_set_error(TJ_EVALUE,
                        "%s: scalar parameter '%s' is %s; only integer scalars bind symbols",
                        k->name, p->name, dt);
  }
  if (symbol < 0 || symbol >= k->nsymbols)
    return tj_set_error(TJ_EVALUE, "%s: scalar parameter '%s': symbol %d out of range [0, %d)",
                        k->name, p->name, symbol, k->nsymbols);
  p->binds = symbol;
  return TJ_OK;
}

int tj_kernel_set_pointer(tj_kernel *k, int32_t index, const char *name, DLDataType dtype,
                          int64_t align, uint32_t flags) {
  TJ__REFUSE_NULL("tj_kernel_set_pointer", k);
  if (align < 0 || (align & (align - 1)))
    return tj_set_error(TJ_EVALUE, "%s: parameter '%s': align must be a power of two, got %lld",
                        k->name, name, (long long)align);
  if (flags & (TJ_BUF_OUTPUT | TJ_BUF_WORKSPACE | TJ_BUF_ZERO))
    return tj_set_error(TJ_EVALUE, "%s: pointer parameter '%s' cannot be an output or a workspace",
                        k->name, name);
  tj__param *p;
  int rc = set_param(k, index, name, TJ_PARAM_POINTER, &p);
  if (rc) return rc;
  p->dtype = dtype;
  p->align = align ? align : 1;
  p->declared_align = align;
  p->flags = flags;
  return TJ_OK;
}

/* Numbers the outputs, then the workspaces (in declaration order each): their
 * out_* indices. */
static int number_outputs(tj_kernel *k) {
  for (int32_t pass = 0; pass < 2; ++pass)
    for (int32_t i = 0; i < k->nparams; ++i) {
      tj__param *p = &k->params[i];
      if (!p->kind)
        return tj_set_error(TJ_EVALUE, "%s: parameter %d was never declared", k->name, i);
      const uint32_t made = pass == 0 ? TJ_BUF_OUTPUT : TJ_BUF_WORKSPACE;
      if (p->kind != TJ_PARAM_BUFFER || !(p->flags & made)) continue;
      if ((p->flags & TJ_BUF_OUTPUT) && (p->flags & TJ_BUF_WORKSPACE))
        return tj_set_error(TJ_EVALUE, "%s: '%s' cannot be both an output and a workspace", k->name,
                            p->name);
      const int32_t at = k->noutputs + k->nworkspaces;
      if (at == TJ_MAX_OUTPUTS)
        return tj_set_error(TJ_EVALUE, "%s: more than %d outputs and workspaces", k->name,
                            TJ_MAX_OUTPUTS);
      if (p->flags & TJ_BUF_OPTIONAL)
        return tj_set_error(TJ_EVALUE, "%s: %s '%s' cannot be optional", k->name,
                            pass == 0 ? "output" : "workspace", p->name);
      p->output = at;
      k->output_params[at] = i;
      if (pass == 0)
        ++k->noutputs;
      else
        ++k->nworkspaces;
      k->zero_fill |= pass == 1 && (p->flags & TJ_BUF_ZERO) != 0;
    }
  k->nallocs = k->noutputs + k->nworkspaces;
  return TJ_OK;
}

/* Numbers the inputs (caller positions) and checks that every symbol is bound
 * by a direct occurrence in a required input, or by an integer scalar. */
static int number_inputs(tj_kernel *k) {
  int32_t bound[TJ_MAX_SYMBOLS] = {0};
  for (int32_t i = 0; i < k->nparams; ++i) {
    tj__param *p = &k->params[i];
    if (p->output >= 0) continue;
    p->position = k->ninputs++;
    const int optional = p->kind == TJ_PARAM_BUFFER && (p->flags & TJ_BUF_OPTIONAL);
    if (!optional) k->nrequired = k->ninputs;
    if (p->binds >= 0) bound[p->binds] = 1;
    if (p->kind != TJ_PARAM_BUFFER || optional) continue;
    /* Only a required input binds: an optional one may be None. */
    for (int32_t d = 0; d < p->ndim; ++d) {
      int32_t s = k->exprs[p->shape[d]].sym;
      if (s >= 0) bound[s] = 1;
      if (p->has_strides && (s = k->exprs[p->strides[d]].sym) >= 0) bound[s] = 1;
    }
  }
  for (int32_t s = 0; s < k->nsymbols; ++s)
    if (!bound[s])
      return tj_set_error(TJ_EVALUE,
                          "%s: symbol '%s' is not bound by any input: it must appear alone as a "
                          "dimension or stride of a required input buffer, or be an integer "
                          "scalar's",
                          k->name, k->symbol_names[s]);
  return TJ_OK;
}

/* Without tj_kernel_set_abi: every parameter in declaration order, then every
 * symbol no integer scalar binds (such a symbol reaches the kernel as that
 * scalar). */
static void default_abi(tj_kernel *k) {
  k->nabi = 0;
  for (int32_t i = 0; i < k->nparams; ++i)
    k->abi[k->nabi++] = (tj_abi_arg){TJ_ABI_PARAM, i, {kDLInt, 64, 1}};
  int32_t by_scalar[TJ_MAX_SYMBOLS] = {0};
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].binds >= 0) by_scalar[k->params[i].binds] = 1;
  for (int32_t s = 0; s < k->nsymbols; ++s)
    if (!by_scalar[s]) k->abi[k->nabi++] = (tj_abi_arg){TJ_ABI_SYMBOL, s, {kDLInt, 64, 1}};
}

int tj_kernel_finalize(tj_kernel *k) {
  int rc = check_mutable(k);
  if (rc) return rc;
  k->ninputs = k->nrequired = k->noutputs = k->nworkspaces = k->zero_fill = 0;
  if ((rc = number_outputs(k)) || (rc = number_inputs(k))) return rc;
  if (!k->has_abi) default_abi(k);
  tj__launch *first = &k->launches[0];
  memcpy(first->config, k->launch, sizeof(first->config));
  first->nabi = k->nabi;
  first->abi = k->abi;
  for (int32_t m = 0; m < k->ntensormaps; ++m) {
    const tj__param *p = &k->params[k->tensormaps[m].param];
    if (p->kind != TJ_PARAM_BUFFER && p->kind != TJ_PARAM_POINTER)
      return tj_set_error(TJ_EVALUE,
                          "%s: tensor map '%s' describes parameter '%s', which is not a "
                          "buffer or pointer",
                          k->name, k->tensormaps[m].name, p->name);
  }
  k->check_integers = 0;
  for (int32_t s = 0; s < k->nsymbols; ++s)
    k->check_integers |= k->symbol_dtype[s].code != kDLInt || k->symbol_dtype[s].bits != 64;
  for (int32_t l = 0; l < k->nlaunches; ++l)
    for (int32_t a = 0; a < k->launches[l].nabi; ++a)
      k->check_integers |= k->launches[l].abi[a].source == TJ_ABI_EXPR;
  if ((rc = tj__memo_create(k))) return rc;
  k->finalized = 1;
  return TJ_OK;
}

/* ---- CUDA module image and launch configuration ----------------------------- */

static int check_cuda_kernel(const tj_kernel *k, const char *what) {
  TJ__REFUSE_NULL("tj_kernel", k);
  if (k->target != TJ_TARGET_CUDA)
    return tj_set_error(TJ_EVALUE, "%s: %s is only for cuda kernels", k->name, what);
  return TJ_OK;
}

int tj_kernel_set_image(tj_kernel *k, const void *image, int64_t size, const char *symbol) {
  int rc = check_cuda_kernel(k, "a module image");
  if (rc) return rc;
  if (k->image != NULL)
    return tj_set_error(TJ_EVALUE, "%s: a module image is already loaded", k->name);
  if (image == NULL || size <= 0)
    return tj_set_error(TJ_EVALUE, "%s: the module image is empty", k->name);
  if (symbol == NULL || *symbol == 0)
    return tj_set_error(TJ_EVALUE, "%s: no kernel function name given", k->name);
  unsigned char *copy = malloc((size_t)size + 1);
  char *name = copy_string(symbol);
  if (copy == NULL || name == NULL) {
    free(copy);
    free(name);
    return tj_set_error(TJ_ENOMEM, "out of memory");
  }
  if ((rc = tj__cuda_modules_create(k)) != TJ_OK) {
    free(copy);
    free(name);
    return rc;
  }
  memcpy(copy, image, (size_t)size);
  copy[size] = 0;
  k->image = copy;
  k->image_size = size;
  k->image_symbol = name;
  k->launches[0].symbol = name; /* borrowed: the image may come after finalize */
  return TJ_OK;
}

/* tj_kernel_load for a CUDA kernel: reads the module image at `path`. */
static int load_image_file(tj_kernel *k, const char *path, const char *symbol) {
  if (k->image != NULL)
    return tj_set_error(TJ_EVALUE, "%s: a module image is already loaded", k->name);
  FILE *file = fopen(path, "rb");
  if (file == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: cannot open CUDA module image %s: %s", k->name, path,
                        strerror(errno));
  char *data = NULL;
  long size = -1;
  if (fseek(file, 0, SEEK_END) == 0 && (size = ftell(file)) > 0 && fseek(file, 0, SEEK_SET) == 0 &&
      (data = malloc((size_t)size)) != NULL && fread(data, 1, (size_t)size, file) != (size_t)size) {
    free(data);
    data = NULL;
  }
  int err = errno;
  fclose(file);
  int rc;
  if (size == 0)
    rc = tj_set_error(TJ_ERUNTIME, "%s: CUDA module image %s is empty", k->name, path);
  else if (data == NULL)
    rc = tj_set_error(TJ_ERUNTIME, "%s: cannot read CUDA module image %s: %s", k->name, path,
                      strerror(err ? err : EIO));
  else
    rc = tj_kernel_set_image(k, data, size, symbol);
  free(data);
  return rc;
}

int tj_kernel_set_launch(tj_kernel *k, const int32_t grid_ids[3], const int32_t block_ids[3],
                         int32_t shared_mem_id) {
  int rc = check_cuda_kernel(k, "a launch configuration");
  if (rc) return rc;
  if (k->finalized)
    return tj_set_error(TJ_EVALUE, "%s: the kernel is finalized and cannot change", k->name);
  int32_t ids[7] = {grid_ids[0],  grid_ids[1],  grid_ids[2],  block_ids[0],
                    block_ids[1], block_ids[2], shared_mem_id};
  if ((rc = check_expr_ids(k, "launch configuration", ids, 7))) return rc;
  memcpy(k->launch, ids, sizeof(ids));
  k->has_launch = 1;
  return TJ_OK;
}

int tj_kernel_add_launch(tj_kernel *k, const char *symbol, const int32_t grid_ids[3],
                         const int32_t block_ids[3], int32_t shared_mem_id, int32_t nargs,
                         const tj_abi_arg *args, int32_t *out_index) {
  int rc = check_cuda_kernel(k, "a further launch");
  if (rc || (rc = check_mutable(k))) return rc;
  if (k->nlaunches == TJ_MAX_LAUNCHES)
    return tj_set_error(TJ_EVALUE, "%s: more than %d kernel launches", k->name, TJ_MAX_LAUNCHES);
  if (symbol == NULL || *symbol == 0)
    return tj_set_error(TJ_EVALUE, "%s: no kernel function name given", k->name);
  int32_t ids[7] = {grid_ids[0],  grid_ids[1],  grid_ids[2],  block_ids[0],
                    block_ids[1], block_ids[2], shared_mem_id};
  if ((rc = check_expr_ids(k, "launch configuration", ids, 7)) || (rc = check_abi(k, nargs, args)))
    return rc;
  tj__launch *l = &k->launches[k->nlaunches];
  memset(l, 0, sizeof(*l));
  l->symbol = copy_string(symbol);
  l->abi = malloc(sizeof(*args) * (size_t)(nargs > 0 ? nargs : 1));
  if (l->symbol == NULL || l->abi == NULL) {
    free(l->symbol);
    free(l->abi);
    l->symbol = NULL;
    l->abi = NULL;
    return tj_set_error(TJ_ENOMEM, "out of memory");
  }
  if (nargs > 0) memcpy(l->abi, args, sizeof(*args) * (size_t)nargs);
  l->nabi = nargs;
  memcpy(l->config, ids, sizeof(ids));
  *out_index = k->nlaunches++;
  return TJ_OK;
}

int tj_kernel_set_launch_attrs(tj_kernel *k, int32_t index, const int32_t cluster_ids[3],
                               uint32_t flags) {
  int rc = check_cuda_kernel(k, "launch attributes");
  if (rc || (rc = check_mutable(k))) return rc;
  if (index < 0 || index >= k->nlaunches)
    return tj_set_error(TJ_EVALUE, "%s: launch %d does not exist (%d launches)", k->name, index,
                        k->nlaunches);
  if (flags & ~(TJ_LAUNCH_COOPERATIVE | TJ_LAUNCH_PDL))
    return tj_set_error(TJ_EVALUE, "%s: launch %d: unknown flags %#x", k->name, index, flags);
  if (cluster_ids != NULL && (rc = check_expr_ids(k, "cluster dimensions", cluster_ids, 3)))
    return rc;
  if (cluster_ids != NULL && (flags & TJ_LAUNCH_COOPERATIVE))
    return tj_set_error(TJ_EVALUE,
                        "%s: launch %d: a cooperative launch cannot have cluster dimensions",
                        k->name, index);
  tj__launch *l = &k->launches[index];
  l->has_cluster = cluster_ids != NULL;
  if (cluster_ids != NULL) memcpy(l->cluster, cluster_ids, sizeof(l->cluster));
  l->flags = flags;
  return TJ_OK;
}

int tj_kernel_add_tensormap(tj_kernel *k, const tj_tensormap *map, int32_t *out_id) {
  int rc = check_cuda_kernel(k, "a tensor map");
  if (rc || (rc = check_mutable(k))) return rc;
  const char *name = map->name ? map->name : "";
  if (k->ntensormaps == TJ_MAX_TENSORMAPS)
    return tj_set_error(TJ_EVALUE, "%s: more than %d tensor maps", k->name, TJ_MAX_TENSORMAPS);
  if (map->param < 0 || map->param >= k->nparams)
    return tj_set_error(TJ_EVALUE, "%s: tensor map '%s': parameter %d out of range (%d)", k->name,
                        name, map->param, k->nparams);
  if (map->rank < 1 || map->rank > TJ_MAX_TENSORMAP_RANK)
    return tj_set_error(TJ_EVALUE, "%s: tensor map '%s': rank %d, expected 1 to %d", k->name, name,
                        map->rank, TJ_MAX_TENSORMAP_RANK);
  if (map->im2col != 0 && map->im2col != 1)
    return tj_set_error(TJ_EVALUE, "%s: tensor map '%s': im2col must be 0 or 1, got %d", k->name,
                        name, map->im2col);
  if (map->im2col && (map->rank < 3 || map->rank > 5))
    return tj_set_error(TJ_EVALUE,
                        "%s: tensor map '%s': an im2col tensor map has rank 3, 4 or 5 (NWC, "
                        "NHWC, NDHWC), got %d",
                        k->name, name, map->rank);
  char what[200];
  snprintf(what, sizeof(what), "tensor map '%s'", name);
  if ((rc = check_expr_ids(k, what, map->dims, map->rank)) ||
      (rc = check_expr_ids(k, what, map->strides, map->rank - 1)) ||
      (rc = check_expr_ids(k, what, map->element_strides, map->rank)))
    return rc;
  if (!map->im2col && (rc = check_expr_ids(k, what, map->box, map->rank))) return rc;
  if (map->im2col && ((rc = check_expr_ids(k, what, map->lower_corner, map->rank - 2)) ||
                      (rc = check_expr_ids(k, what, map->upper_corner, map->rank - 2)) ||
                      (rc = check_expr_ids(k, what, &map->channels_per_pixel, 1)) ||
                      (rc = check_expr_ids(k, what, &map->pixels_per_column, 1))))
    return rc;
  tj_tensormap *m = &k->tensormaps[k->ntensormaps];
  *m = *map;
  if ((m->name = copy_string(name)) == NULL) return tj_set_error(TJ_ENOMEM, "out of memory");
  *out_id = k->ntensormaps++;
  return TJ_OK;
}

/* dlopen `path` and resolve `symbol` in it; on failure nothing stays open. */
static int open_symbol(const tj_kernel *k, const char *path, const char *symbol, void **lib,
                       void **address) {
  *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*lib == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: cannot load kernel library %s: %s", k->name, path,
                        dlerror());
  dlerror();
  *address = dlsym(*lib, symbol);
  if (*address == NULL) {
    const char *why = dlerror();
    tj_set_error(TJ_ERUNTIME, "%s: kernel library %s has no function '%s': %s", k->name, path,
                 symbol, why ? why : "symbol is NULL");
    dlclose(*lib);
    *lib = NULL;
    return TJ_ERUNTIME;
  }
  return TJ_OK;
}

int tj_kernel_load(tj_kernel *k, const char *path, const char *symbol) {
  TJ__REFUSE_NULL("tj_kernel_load", k);
  TJ__REFUSE_NULL("tj_kernel_load", path);
  if (k->target == TJ_TARGET_CUDA) return load_image_file(k, path, symbol);
  if (k->library) return tj_set_error(TJ_EVALUE, "%s: a library is already loaded", k->name);
  void *lib, *entry;
  int rc = open_symbol(k, path, symbol, &lib, &entry);
  if (rc) return rc;
  k->library = lib;
  /* POSIX guarantees data and function pointers convert through dlsym. */
  *(void **)&k->entry = entry;
  return TJ_OK;
}

int tj_kernel_load_prebuilt(tj_kernel *k, const char *glue, const char *entry, const char *library,
                            const char *symbol) {
  TJ__REFUSE_NULL("tj_kernel_load_prebuilt", k);
  TJ__REFUSE_NULL("tj_kernel_load_prebuilt", glue);
  TJ__REFUSE_NULL("tj_kernel_load_prebuilt", library);
  if (k->target != TJ_TARGET_CPU)
    return tj_set_error(TJ_EVALUE, "%s: a prebuilt shared library is for cpu kernels", k->name);
  if (k->library) return tj_set_error(TJ_EVALUE, "%s: a library is already loaded", k->name);
  void *kernel_lib, *function, *glue_lib, *entry_fn, *slot;
  int rc = open_symbol(k, library, symbol, &kernel_lib, &function);
  if (rc) return rc;
  if ((rc = open_symbol(k, glue, entry, &glue_lib, &entry_fn))) {
    dlclose(kernel_lib);
    return rc;
  }
  if ((slot = dlsym(glue_lib, "tilejit_kernel_function")) == NULL) {
    dlclose(glue_lib);
    dlclose(kernel_lib);
    return tj_set_error(TJ_ERUNTIME, "%s: glue library %s has no tilejit_kernel_function", k->name,
                        glue);
  }
  *(void **)slot = function;
  k->library = glue_lib;
  k->kernel_library = kernel_lib;
  *(void **)&k->entry = entry_fn;
  return TJ_OK;
}

int tj_kernel_set_entry(tj_kernel *k, tj_cpu_entry entry) {
  TJ__REFUSE_NULL("tj_kernel_set_entry", k);
  k->entry = entry;
  return TJ_OK;
}

const char *tj_kernel_name(const tj_kernel *k) { return k ? k->name : ""; }
int32_t tj_kernel_num_params(const tj_kernel *k) { return k ? k->nparams : -1; }
int32_t tj_kernel_num_symbols(const tj_kernel *k) { return k ? k->nsymbols : -1; }
int32_t tj_kernel_num_outputs(const tj_kernel *k) { return k ? k->noutputs : -1; }
int32_t tj_kernel_num_workspaces(const tj_kernel *k) { return k ? k->nworkspaces : -1; }
int32_t tj_kernel_output_param(const tj_kernel *k, int32_t i) {
  return k != NULL && i >= 0 && i < k->nallocs ? k->output_params[i] : -1;
}
int32_t tj_kernel_param_kind(const tj_kernel *k, int32_t index) {
  return k != NULL && index >= 0 && index < k->nparams ? k->params[index].kind : 0;
}
const char *tj_kernel_param_name(const tj_kernel *k, int32_t index) {
  return k != NULL && index >= 0 && index < k->nparams ? k->params[index].name : NULL;
}

/* ---- Reading the signature back ----------------------------------------------- */

int32_t tj_kernel_target(const tj_kernel *k) { return k ? k->target : 0; }
int32_t tj_kernel_num_exprs(const tj_kernel *k) { return k ? k->nexprs : -1; }
int32_t tj_kernel_num_launches(const tj_kernel *k) {
  return k == NULL ? -1 : k->target == TJ_TARGET_CUDA ? k->nlaunches : 0;
}
int32_t tj_kernel_num_tensormaps(const tj_kernel *k) { return k ? k->ntensormaps : -1; }

/* A finalized kernel and an index in [0, n), else a refusal naming `what`. */
static int check_read(const tj_kernel *k, const char *what, int32_t index, int32_t n) {
  TJ__REFUSE_NULL("tj_kernel", k);
  if (!k->finalized)
    return tj_set_error(TJ_EVALUE, "%s: the kernel is not finalized; its %s cannot be read yet",
                        k->name, what);
  if (index < 0 || index >= n)
    return tj_set_error(TJ_EVALUE, "%s: %s %d out of range [0, %d)", k->name, what, index, n);
  return TJ_OK;
}

int tj_kernel_symbol_info(const tj_kernel *k, int32_t symbol, tj_symbol_info *out) {
  int rc = check_read(k, "symbol", symbol, k ? k->nsymbols : 0);
  if (rc) return rc;
  out->name = k->symbol_names[symbol];
  out->divisibility = k->symbol_div[symbol];
  out->dtype = k->symbol_dtype[symbol];
  return TJ_OK;
}

int tj_kernel_expr_info(const tj_kernel *k, int32_t expr, tj_expr_info *out) {
  int rc = check_read(k, "expression", expr, k ? k->nexprs : 0);
  if (rc) return rc;
  const tj__expr *e = &k->exprs[expr];
  out->code = e->code;
  out->n = e->n;
  out->text = e->text ? e->text : "";
  return TJ_OK;
}

int tj_kernel_param_info(const tj_kernel *k, int32_t index, tj_param_info *out) {
  int rc = check_read(k, "parameter", index, k ? k->nparams : 0);
  if (rc) return rc;
  const tj__param *p = &k->params[index];
  int buffer = p->kind == TJ_PARAM_BUFFER;
  out->kind = p->kind;
  out->name = p->name;
  out->dtype = p->dtype;
  out->ndim = buffer ? p->ndim : 0;
  out->shape = buffer ? p->shape : NULL;
  out->strides = buffer && p->has_strides ? p->strides : NULL;
  out->align = p->kind == TJ_PARAM_SCALAR ? 0 : p->declared_align;
  out->flags = p->kind == TJ_PARAM_SCALAR ? 0 : p->flags;
  out->symbol = p->kind == TJ_PARAM_SCALAR ? p->binds : -1;
  return TJ_OK;
}

int tj_kernel_abi_info(const tj_kernel *k, int32_t *n, const tj_abi_arg **args) {
  int rc = check_read(k, "argument list", 0, 1);
  if (rc) return rc;
  *n = k->has_abi ? k->nabi : -1;
  *args = k->has_abi ? k->abi : NULL;
  return TJ_OK;
}

int tj_kernel_launch_info(const tj_kernel *k, int32_t index, tj_launch_info *out) {
  int rc = check_read(k, "launch", index, tj_kernel_num_launches(k));
  if (rc) return rc;
  const tj__launch *l = &k->launches[index];
  out->symbol = l->symbol ? l->symbol : "";
  memcpy(out->grid, l->config, sizeof(out->grid));
  memcpy(out->block, l->config + 3, sizeof(out->block));
  out->shared_mem = l->config[6];
  out->cluster = l->has_cluster ? l->cluster : NULL;
  out->flags = l->flags;
  out->nargs = l->nabi;
  out->args = l->abi;
  return TJ_OK;
}

int tj_kernel_tensormap_info(const tj_kernel *k, int32_t index, const tj_tensormap **out) {
  int rc = check_read(k, "tensor map", index, k ? k->ntensormaps : 0);
  if (rc) return rc;
  *out = &k->tensormaps[index];
  return TJ_OK;
}
