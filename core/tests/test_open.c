/*
 * Opening exports (tj_kernel_open): SHA-256, a hand-written export of the
 * vec_add fixture library opened and called, and damaged exports refused by
 * file and reason. tests/test_export.py opens exports tilejit wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builders.h"
#include "internal.h"

static void check_sha256(const char *data, size_t size, const char *want) {
  char got[65];
  tj__sha256_hex(data, size, got);
  CHECK_EQ_STR(got, want);
}

TEST(open_sha256) {
  check_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha256(two_blocks, strlen(two_blocks),
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  size_t n = 1000000;
  char *a = malloc(n);
  CHECK(a != NULL);
  memset(a, 'a', n);
  check_sha256(a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}

/* ---- A hand-written export of tests/fixtures/vec_add.c ------------------------ */

/* The builder calls, then the load line: all the core needs. */
#define VEC_ADD_BUILT             \
  "kernel vec_add cpu 3\n"        \
  "symbol n 1 0:64:1\n"           \
  "expr 1 2 0 n\n"                \
  "buffer 0 A 2:32:1 0 2 1 0 -\n" \
  "buffer 1 B 2:32:1 0 2 1 0 -\n" \
  "buffer 2 C 2:32:1 0 4 1 0 -\n"
#define VEC_ADD_LOAD "load kernel.so tilejit_packed_entry\n"

static const char SIGNATURE[] =
    "tilejit-signature 1\n"
    "# vec_add(A: (n,) float32, B: (n,) float32) -> C: (n,) float32\n" VEC_ADD_BUILT
    "out_idx 1 2\n"
    "function vec_add void vec_add(const float *A, const float *B, float *C, int64_t n)\n"
    "arg A 1 0 float32 1 1 0\n"
    "arg B 1 1 float32 1 1 1\n"
    "arg C 1 2 float32 1 0 2\n"
    "arg n 2 0 int64 0 0 -1\n" VEC_ADD_LOAD;

static char export_dir[256];

static void write_file(const char *name, const void *data, size_t size) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", export_dir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(data, 1, size, f) == size);
  fclose(f);
}

static char *read_fixture(size_t *size) {
  char path[512];
  tjt_fixture_path("vec_add.so", path, sizeof(path));
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc(*size);
  CHECK(data != NULL && fread(data, 1, *size, f) == *size);
  fclose(f);
  return data;
}

/* Writes the export: the library, `signature` and a MANIFEST whose first
 * line is `header` and which lists both files with their hashes. */
static void write_export(const char *header, const char *signature) {
  snprintf(export_dir, sizeof(export_dir), "/tmp/tilejit-open-XXXXXX");
  CHECK(mkdtemp(export_dir) != NULL);
  size_t size;
  char *library = read_fixture(&size);
  write_file("kernel.so", library, size);
  write_file("signature.tj", signature, strlen(signature));
  char lib_hash[65], sig_hash[65], manifest[1024];
  tj__sha256_hex(library, size, lib_hash);
  tj__sha256_hex(signature, strlen(signature), sig_hash);
  snprintf(manifest, sizeof(manifest),
           "%s\ntilejit 0.1.0\ntarget cpu\nfile kernel.so %zu %s\nfile signature.tj %zu %s\n",
           header, size, lib_hash, strlen(signature), sig_hash);
  write_file("MANIFEST", manifest, strlen(manifest));
  free(library);
}

static void remove_export(void) {
  const char *names[] = {"kernel.so", "signature.tj", "MANIFEST"};
  char path[512];
  for (int i = 0; i < 3; ++i) {
    snprintf(path, sizeof(path), "%s/%s", export_dir, names[i]);
    unlink(path);
  }
  rmdir(export_dir);
}

/* Calls an opened vec_add export: C = A + B over five elements. */
static void call_vec_add(tj_kernel *k) {
  const int64_t n = 5;
  float a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, c[5] = {0};
  tjt_tensor ta, tb, tc;
  tjt_tensor_init(&ta, a, TJT_F32, 1, &n, NULL);
  tjt_tensor_init(&tb, b, TJT_F32, 1, &n, NULL);
  tjt_tensor_init(&tc, c, TJT_F32, 1, &n, NULL);
  tj_arg args[2], out;
  tjt_arg_tensor(&args[0], &ta, 0);
  tjt_arg_tensor(&args[1], &tb, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK_EQ_INT(f.out_shape[0][0], 5);
  tjt_arg_tensor(&out, &tc, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK_OK(tj_call_launch(&f));
  CHECK(c[4] == 55.0f);
}

TEST(open_calls_an_export) {
  write_export("tilejit-export 1", SIGNATURE);
  tj_kernel *k;
  CHECK_OK(tj_kernel_open(export_dir, &k));
  CHECK_EQ_STR(tj_kernel_name(k), "vec_add");
  CHECK_EQ_INT(tj_kernel_num_outputs(k), 1);
  call_vec_add(k);
  /* A refused call: the message the Python binding gives. */
  const int64_t n = 5;
  float a[5] = {0};
  int32_t b[5] = {0};
  tjt_tensor ta, tb;
  tjt_tensor_init(&ta, a, TJT_F32, 1, &n, NULL);
  tjt_tensor_init(&tb, b, TJT_DTYPE(kDLInt, 32), 1, &n, NULL);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &ta, 0);
  tjt_arg_tensor(&args[1], &tb, 0);
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("vec_add: argument 1 'B': expected dtype float32, got int32");
  tj_kernel_free(k);
  remove_export();
}

/* Opening the export written from `header` and `signature` fails with a
 * message holding `what`. */
static void check_refused(const char *header, const char *signature, const char *what) {
  write_export(header, signature);
  tj_kernel *k = (tj_kernel *)1;
  CHECK_STATUS(tj_kernel_open(export_dir, &k), TJ_EVALUE);
  CHECK(k == NULL);
  CHECK_ERROR_STARTS_WITH("tilejit export /tmp/tilejit-open-");
  CHECK_ERROR_CONTAINS(what);
  remove_export();
}

/* SIGNATURE with its first occurrence of `old` replaced by `new`. */
static const char *edited(const char *old, const char *new) {
  static char buf[sizeof(SIGNATURE) + 256];
  const char *at = strstr(SIGNATURE, old);
  CHECK(at != NULL);
  snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - SIGNATURE), SIGNATURE, new, at + strlen(old));
  return buf;
}

TEST(open_refuses_damaged_exports) {
  static const struct {
    const char *header, *old, *new, *what;
  } cases[] = {
      {"tilejit-export 2", NULL, NULL, "MANIFEST: export format version 2"},
      {"tilejit-export", NULL, NULL, "MANIFEST: line 1 is not"},
      {"tilejit-export 1\nsigned-by me", NULL, NULL, "MANIFEST: line 2: unknown entry"},
      {"tilejit-export 1", "tilejit-signature 1", "tilejit-signature 9",
       "signature.tj: line 1: signature format version 9"},
      {"tilejit-export 1", "kernel vec_add cpu 3\n", "",
       "signature.tj: line 3: expected the 'kernel' line first"},
      {"tilejit-export 1", "kernel vec_add cpu", "kernel vec_add cuda",
       "target 'cuda', but MANIFEST says 'cpu'"},
      {"tilejit-export 1", "buffer 1 B 2:32:1", "buffer 1 B float32",
       "signature.tj: line 7: dtype 'float32' is not code:bits:lanes"},
      {"tilejit-export 1", "expr 1 2 0 n", "expr 1 2 7 n", "signature.tj: line 5: "},
      {"tilejit-export 1", "buffer 0 A 2:32:1 0 2 1 0 -", "buffer 0 A 2:32:1 0 2 1 0",
       "'buffer' takes"},
      {"tilejit-export 1", "load kernel.so", "load other.so",
       "'load' names file 'other.so', which MANIFEST does not list"},
      {"tilejit-export 1", "load kernel.so tilejit_packed_entry\n", "",
       "the file ends before its load line"},
      {"tilejit-export 1", "out_idx", "launch_everything 1\nout_idx",
       "unknown entry 'launch_everything'"},
      {"tilejit-export 1", "out_idx 1 2", "out_idx 1 1",
       "signature.tj: line 9: out_idx (1,) does not list the output buffers (2,)"},
      {"tilejit-export 1", "out_idx 1 2", "out_idx 2 2 2",
       "line 9: out_idx names parameter 2 twice"},
      {"tilejit-export 1", "out_idx 1 2", "out_idx 1 3", "output parameter '3' is not an integer"},
      {"tilejit-export 1", "out_idx 1 2", "out_idx 1 2\nout_idx 1 2", "a second out_idx line"},
      {"tilejit-export 1", "function vec_add void",
       "arg A 1 0 float32 1 1 0\nfunction vec_add void",
       "line 10: 'arg' before any 'function' line"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 9 0 int64 0 0 -1",
       "line 14: argument source '9' is not an integer in [1, 4]"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 2 0 int64 2 0 -1",
       "pointer '2' is not an integer in [0, 1]"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 2 0 int64 0 0", "'arg' takes 7 fields"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 2 1 int64 0 0 -1",
       "line 14: argument 'n' passes symbol 1, but 1 are declared above it"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 3 1 int64 0 0 -1",
       "argument 'n' passes expression 1, but 1 are declared above it"},
      {"tilejit-export 1", "arg C 1 2 float32 1 0 2", "arg C 1 2 float32 1 0 1",
       "line 13: argument 'C': parameter 1, expected 2"},
      {"tilejit-export 1", "arg n 2 0 int64 0 0 -1", "arg n 2 0 int64 0 0 2",
       "argument 'n': parameter 2, expected -1"},
      {"tilejit-export 1", "function vec_add void vec_add(", "function vec_add\n#",
       "line 10: 'function' takes a name and a prototype"},
      {"tilejit-export 1", "int64_t n)", "int64_t \xe9)",
       "line 10: byte 0xe9 at column 81 is not UTF-8 (only comment lines may hold other bytes)"},
      {"tilejit-export 1", "int64_t n)", "int64_t \xed\xa0\x80)", "byte 0xed at column 81"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i)
    check_refused(cases[i].header, cases[i].old ? edited(cases[i].old, cases[i].new) : SIGNATURE,
                  cases[i].what);
  /* A file changed after the manifest was written. */
  write_export("tilejit-export 1", SIGNATURE);
  write_file("kernel.so",
             "\x7f"
             "ELF",
             4);
  tj_kernel *k;
  CHECK_STATUS(tj_kernel_open(export_dir, &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("kernel.so: 4 bytes, but MANIFEST lists");
  remove_export();
  CHECK_STATUS(tj_kernel_open("/nonexistent/export", &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("tilejit export /nonexistent/export: MANIFEST: cannot read it");
}

/* What the export says is read back as it says it: the builder calls' signature
 * and the lines beyond them (out_idx, function, arg, load). Non-UTF-8 bytes
 * are for comment lines only. */
TEST(open_reads_what_the_export_says) {
  write_export("tilejit-export 1", edited("# vec_add(", "# caf\xe9 vec_add("));
  tj_kernel *k;
  CHECK_OK(tj_kernel_open(export_dir, &k));
  CHECK_EQ_INT(tj_kernel_target(k), TJ_TARGET_CPU);
  CHECK_EQ_INT(tj_kernel_num_launches(k), 0);
  CHECK_EQ_INT(tj_kernel_num_exprs(k), 1);
  tj_param_info c;
  CHECK_OK(tj_kernel_param_info(k, 2, &c));
  CHECK_EQ_STR(c.name, "C");
  CHECK(c.kind == TJ_PARAM_BUFFER && c.flags == TJ_BUF_OUTPUT && c.ndim == 1 && c.shape[0] == 0);
  CHECK(c.dtype.code == kDLFloat && c.dtype.bits == 32 && c.strides == NULL && c.align == 0);
  int32_t n;
  const tj_abi_arg *abi;
  CHECK_OK(tj_kernel_abi_info(k, &n, &abi));
  CHECK(n == -1 && abi == NULL);
  const int32_t *out_idx;
  CHECK_OK(tj_kernel_export_out_idx(k, &n, &out_idx));
  CHECK(n == 1 && out_idx[0] == 2);
  CHECK_EQ_INT(tj_kernel_export_num_functions(k), 1);
  tj_export_function fn;
  CHECK_OK(tj_kernel_export_function(k, 0, &fn));
  CHECK_EQ_STR(fn.name, "vec_add");
  CHECK_EQ_STR(fn.prototype, "void vec_add(const float *A, const float *B, float *C, int64_t n)");
  CHECK_EQ_INT(fn.nargs, 4);
  CHECK_EQ_STR(fn.args[3].name, "n");
  CHECK_EQ_STR(fn.args[3].dtype, "int64");
  CHECK(fn.args[3].source == TJ_ABI_SYMBOL && fn.args[3].param == -1 && !fn.args[3].pointer);
  CHECK(fn.args[0].pointer && fn.args[0].is_const && !fn.args[2].is_const);
  CHECK_STATUS(tj_kernel_export_function(k, 1, &fn), TJ_EVALUE);
  tj_export_load load;
  CHECK_OK(tj_kernel_export_load(k, &load));
  CHECK_EQ_STR(load.image, "kernel.so");
  CHECK_EQ_STR(load.entry, "tilejit_packed_entry");
  CHECK(load.library == NULL && load.symbol == NULL);
  tj_kernel *again;
  CHECK_OK(tj_kernel_reopen(k, &again)); /* read again from the kept bytes, the same */
  CHECK_OK(tj_kernel_export_function(again, 0, &fn));
  CHECK_EQ_STR(fn.args[1].name, "B");
  tj_kernel_free(again);
  tj_kernel_free(k);
  remove_export();
  /* Without out_idx and function lines: none, for a reader to default. */
  write_export("tilejit-export 1", "tilejit-signature 1\n" VEC_ADD_BUILT VEC_ADD_LOAD);
  CHECK_OK(tj_kernel_open(export_dir, &k));
  CHECK_OK(tj_kernel_export_out_idx(k, &n, &out_idx));
  CHECK(n == -1 && out_idx == NULL);
  CHECK_EQ_INT(tj_kernel_export_num_functions(k), 0);
  call_vec_add(k);
  tj_kernel_free(k);
  remove_export();
  /* A kernel not opened says nothing of an export; one not finalized, nothing yet. */
  CHECK_OK(tj_kernel_create("plain", 1, TJ_TARGET_CPU, &k));
  CHECK_STATUS(tj_kernel_export_out_idx(k, &n, &out_idx), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("plain: the kernel was not opened from an export");
  CHECK_EQ_INT(tj_kernel_export_num_functions(k), 0);
  CHECK_STATUS(tj_kernel_export_load(k, &load), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_param_info(k, 0, &c), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("plain: the kernel is not finalized; its parameter cannot be read yet");
  tj_kernel_free(k);
}

/* The kernel is what was checked: its library is a private copy (two opens of
 * one path never share a dlopen handle), it keeps the checked files, and
 * neither it nor tj_kernel_reopen reads the directory again. */
TEST(open_keeps_what_it_checked) {
  write_export("tilejit-export 1", SIGNATURE);
  tj_kernel *a, *b, *c;
  CHECK_OK(tj_kernel_open(export_dir, &a));
  CHECK_OK(tj_kernel_open(export_dir, &b));
  CHECK(a->library != NULL && b->library != NULL && a->library != b->library);
  CHECK_EQ_INT(tj_kernel_export_num_files(a), 2);
  CHECK_EQ_STR(tj_kernel_export_arch(a), "");
  int found = 0;
  for (int32_t i = 0; i < 2; ++i) {
    const char *name, *sha;
    const void *data;
    int64_t size;
    CHECK_OK(tj_kernel_export_file(a, i, &name, &data, &size, &sha));
    char digest[65];
    tj__sha256_hex(data, (size_t)size, digest);
    CHECK_EQ_STR(digest, sha);
    if (strcmp(name, "signature.tj") == 0) {
      CHECK_EQ_INT(size, (int64_t)strlen(SIGNATURE));
      CHECK(memcmp(data, SIGNATURE, strlen(SIGNATURE)) == 0);
      found = 1;
    }
  }
  CHECK(found);
  CHECK_STATUS(tj_kernel_export_file(a, 2, NULL, NULL, NULL, NULL), TJ_EVALUE);
  remove_export(); /* nothing is read from the directory after the open */
  CHECK_OK(tj_kernel_reopen(a, &c));
  CHECK(c->library != NULL && c->library != a->library);
  CHECK_EQ_INT(tj_kernel_export_num_files(c), 2);
  call_vec_add(c);
  call_vec_add(a);
  tj_kernel *built;
  CHECK_OK(tj_kernel_create("plain", 0, TJ_TARGET_CPU, &built));
  CHECK_EQ_INT(tj_kernel_export_num_files(built), 0);
  CHECK(tj_kernel_export_arch(built) == NULL);
  tj_kernel *none = (tj_kernel *)1;
  CHECK_STATUS(tj_kernel_reopen(built, &none), TJ_EVALUE);
  CHECK(none == NULL);
  CHECK_ERROR_CONTAINS("plain: tj_kernel_reopen: the kernel was not opened from an export");
  tj_kernel_free(built);
  tj_kernel_free(a);
  tj_kernel_free(b);
  tj_kernel_free(c);
}

/* A listed file that is a symbolic link or a FIFO is refused by name, never
 * followed or waited on; a NUL byte in MANIFEST is refused by line. */
TEST(open_refuses_links_fifos_and_nul) {
  char path[512], outside[512];
  write_export("tilejit-export 1", SIGNATURE);
  snprintf(path, sizeof(path), "%s/kernel.so", export_dir);
  snprintf(outside, sizeof(outside), "%s.outside.so", export_dir);
  CHECK(rename(path, outside) == 0);
  CHECK(symlink(outside, path) == 0);
  tj_kernel *k;
  CHECK_STATUS(tj_kernel_open(export_dir, &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("kernel.so: cannot read it (it is a symbolic link");
  unlink(path);
  CHECK(mkfifo(path, 0600) == 0);
  CHECK_STATUS(tj_kernel_open(export_dir, &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("kernel.so: cannot read it (it is not a regular file");
  unlink(path);
  unlink(outside);
  remove_export();
  write_export("tilejit-export 1", SIGNATURE);
  write_file("MANIFEST", "tilejit-export 1\ntarget cpu\n# a\0b\n", 34);
  CHECK_STATUS(tj_kernel_open(export_dir, &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("MANIFEST: line 3: a NUL byte");
  remove_export();
}
