/*
 * A libFuzzer target over opening exports (tj_kernel_open, src/open.c): the
 * input is a signature.tj, or (first byte 'M') a MANIFEST, written into a
 * directory with the other files an export has; the manifest otherwise lists
 * them with their true sizes and hashes, so every input reaches the parser
 * and the builder calls behind it. The image is a copy of the test fixture
 * tests/fixtures/vec_add.c (TJT_FIXTURE_LIBRARY), whose tilejit_packed_entry a
 * `load` line may name.
 *
 *   make -C core fuzz              builds it and runs it (FUZZ_OPEN_TIME seconds)
 *
 * Any memory error, leak or undefined behaviour is a finding, and so is a
 * broken promise (abort()): a refusal that is not TJ_EVALUE with a message
 * naming the directory, or a kernel returned with a failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static char dir[64];

static void write_file(const char *name, const void *data, size_t size) {
  char path[128];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, size, f) != size) abort();
  fclose(f);
}

static char *library;
static size_t library_size;

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/tilejit-fuzz-open-XXXXXX");
  if (mkdtemp(dir) == NULL) abort();
  FILE *f = fopen(TJT_FIXTURE_LIBRARY, "rb");
  if (f == NULL) abort();
  fseek(f, 0, SEEK_END);
  library_size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  library = malloc(library_size);
  if (library == NULL || fread(library, 1, library_size, f) != library_size) abort();
  fclose(f);
  write_file("kernel.so", library, library_size);
}

static const char default_signature[] =
    "tilejit-signature 1\nkernel k cpu 1\nsymbol n 1 0:64:1\nexpr 1 2 0 n\n"
    "buffer 0 A 2:32:1 0 0 1 0 -\nload kernel.so tilejit_packed_entry\n";

/* Everything an opened kernel says of itself is readable: each string
 * terminated, each array as long as its count (a bad read is an ASan finding). */
static size_t total;
static void touch(const char *s) {
  if (s == NULL) abort();
  total += strlen(s);
}

static void read_back(const tj_kernel *k) {
  tj_param_info p;
  for (int32_t i = 0; i < tj_kernel_num_params(k); ++i) {
    if (tj_kernel_param_info(k, i, &p) != TJ_OK) abort();
    touch(p.name);
    for (int32_t d = 0; d < p.ndim; ++d) total += (size_t)p.shape[d] + (p.strides ? 1 : 0);
  }
  tj_expr_info e;
  for (int32_t i = 0; i < tj_kernel_num_exprs(k); ++i) {
    if (tj_kernel_expr_info(k, i, &e) != TJ_OK) abort();
    touch(e.text);
    total += (size_t)e.code[2 * e.n - 1];
  }
  int32_t n;
  const int32_t *out_idx;
  if (tj_kernel_export_out_idx(k, &n, &out_idx) != TJ_OK) abort();
  for (int32_t i = 0; i < n; ++i) total += (size_t)out_idx[i];
  tj_export_function fn;
  for (int32_t i = 0; i < tj_kernel_export_num_functions(k); ++i) {
    if (tj_kernel_export_function(k, i, &fn) != TJ_OK) abort();
    touch(fn.name);
    touch(fn.prototype);
    for (int32_t a = 0; a < fn.nargs; ++a) {
      touch(fn.args[a].name);
      touch(fn.args[a].dtype);
    }
  }
  tj_export_load load;
  if (tj_kernel_export_load(k, &load) != TJ_OK) abort();
  touch(load.image);
  touch(load.entry);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) setup();
  int manifest_mode = size > 0 && data[0] == 'M';
  const char *signature = manifest_mode ? default_signature : (const char *)data;
  size_t signature_size = manifest_mode ? strlen(default_signature) : size;
  write_file("signature.tj", signature, signature_size);
  if (manifest_mode) {
    write_file("MANIFEST", data + 1, size - 1);
  } else {
    char lib_hash[65], sig_hash[65], manifest[512];
    tj__sha256_hex(library, library_size, lib_hash);
    tj__sha256_hex(signature, signature_size, sig_hash);
    int n = snprintf(manifest, sizeof(manifest),
                     "tilejit-export 1\ntarget cpu\nfile kernel.so %zu %s\nfile signature.tj %zu "
                     "%s\n",
                     library_size, lib_hash, signature_size, sig_hash);
    write_file("MANIFEST", manifest, (size_t)n);
  }
  tj_kernel *k = (tj_kernel *)&size;
  int rc = tj_kernel_open(dir, &k);
  if (rc == TJ_OK) {
    if (k == NULL) abort();
    read_back(k);
    tj_kernel_free(k);
  } else {
    const char *message = tj_last_error();
    if (k != NULL || (rc != TJ_EVALUE && rc != TJ_ENOMEM) || message == NULL ||
        strncmp(message, "tilejit export ", 15) != 0)
      abort();
  }
  return 0;
}
