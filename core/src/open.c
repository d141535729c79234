/* Opening an exported kernel (tj_kernel_open): the manifest read and every file
 * it lists checked against its size and SHA-256, the target checked against
 * this machine, the signature file replayed as the builder calls that made the
 * kernel, and its image loaded. docs/export.md describes both files. */
#include "open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define EXPORT_FORMAT 1
#define SIGNATURE_FORMAT 1
#define SIGNATURE_FILE "signature.tj"
#define MAX_FILES 16
#define NAME_SIZE 128
#define OPEN_ATTEMPTS 20 /* reads of a directory replaced meanwhile, before giving up */
#define NOT_REGULAR (-1) /* read_at: a FIFO, device, socket or directory */

typedef struct {
  char name[NAME_SIZE];
  char sha256[65];
  int64_t size;
  char *data; /* the file's bytes as read and checked, owned (NUL-terminated) */
} listed_file;

/* What signature.tj says beyond the builder calls (tj_kernel_export_out_idx,
 * _function, _load); every string and array owned. */
typedef struct {
  int32_t nout; /* -1: no out_idx line */
  int32_t out_line;
  int32_t out_idx[TJ_MAX_OUTPUTS];
  int32_t nfunctions;
  tj_export_function functions[TJ_MAX_LAUNCHES];
  tj_export_load load;
} described;

/* An export as read: kept by the kernel tj_kernel_open makes (tj_kernel_export_file). */
typedef struct {
  char *dir; /* owned */
  char target[16];
  char arch[NAME_SIZE];
  listed_file files[MAX_FILES];
  int32_t nfiles;
  int dirfd; /* while reading: every file is read from this one directory */
  described said;
} manifest;

static void described_free(described *d) {
  for (int32_t f = 0; f < d->nfunctions; ++f) {
    tj_export_function *fn = &d->functions[f];
    for (int32_t a = 0; a < fn->nargs; ++a) {
      free((char *)fn->args[a].name);
      free((char *)fn->args[a].dtype);
    }
    free((void *)fn->args);
    free((char *)fn->name);
    free((char *)fn->prototype);
  }
  free((char *)d->load.image);
  free((char *)d->load.entry);
  free((char *)d->load.library);
  free((char *)d->load.symbol);
  memset(d, 0, sizeof(*d));
  d->nout = -1;
}

static void manifest_free(void *opened) {
  manifest *m = opened;
  if (m == NULL) return;
  described_free(&m->said);
  for (int32_t i = 0; i < m->nfiles; ++i) free(m->files[i].data);
  if (m->dirfd >= 0) close(m->dirfd);
  free(m->dir);
  free(m);
}

static manifest *manifest_new(const char *dir) {
  manifest *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->dirfd = -1;
  m->said.nout = -1;
  if ((m->dir = strdup(dir)) == NULL) {
    free(m);
    return NULL;
  }
  return m;
}

static int refuse(const manifest *m, const char *file, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int refuse(const manifest *m, const char *file, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  return tj_set_error(TJ_EVALUE, "tilejit export %s: %s: %s", m->dir, file, what);
}

/* Reads `name` in the directory `dirfd` whole: 0, an errno value (ELOOP: a
 * symbolic link, never followed), or NOT_REGULAR (a FIFO, device, socket or
 * directory, refused before any read could block). *out is NUL-terminated. */
static int read_at(int dirfd, const char *name, char **out, int64_t *size) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno ? errno : ENOENT;
  struct stat st;
  int err = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : NOT_REGULAR;
  if (err) {
    close(fd);
    return err;
  }
  char *buf = NULL;
  int64_t used = 0, cap = 0;
  for (;;) {
    if (used == cap) {
      cap = cap ? 2 * cap : (st.st_size > 0 ? (int64_t)st.st_size + 1 : 1 << 16);
      char *grown = realloc(buf, (size_t)cap + 1);
      if (grown == NULL) {
        free(buf);
        close(fd);
        return ENOMEM;
      }
      buf = grown;
    }
    ssize_t got = read(fd, buf + used, (size_t)(cap - used));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int err = errno;
      free(buf);
      close(fd);
      return err ? err : EIO;
    }
    if (got == 0) break;
    used += (int64_t)got;
  }
  close(fd);
  buf[used] = '\0';
  *out = buf;
  *size = used;
  return 0;
}

/* Why read_at could not read a file, as a refusal's text. */
static const char *unreadable(int err) {
  if (err == NOT_REGULAR)
    return "it is not a regular file (a FIFO, device, socket or directory): an export's files "
           "must be regular files";
  if (err == ELOOP)
    return "it is a symbolic link: an export's files must be regular files, not links";
  return strerror(err);
}

int tj__nul_line(const char *text, int64_t size) {
  const char *nul = memchr(text, '\0', (size_t)size);
  if (nul == NULL) return 0;
  int line = 1;
  for (const char *p = text; p < nul; ++p) line += *p == '\n';
  return line;
}

void tj__split(char *line, const char *whole, tj__line_tokens *t) {
  t->n = 0;
  char *p = line;
  while (*p && t->n < TJ__MAX_TOKENS) {
    while (*p == ' ' || *p == '\t') ++p;
    if (!*p) break;
    t->rest[t->n] = whole + (p - line);
    t->tok[t->n++] = p;
    while (*p && *p != ' ' && *p != '\t') ++p;
    if (*p) *p++ = '\0';
  }
}

char *tj__next_line(char **cursor) {
  char *line = *cursor;
  if (line == NULL || *line == '\0') return NULL;
  char *end = strchr(line, '\n');
  if (end) {
    *end = '\0';
    *cursor = end + 1;
  } else {
    *cursor = line + strlen(line);
  }
  size_t n = strlen(line);
  if (n && line[n - 1] == '\r') line[n - 1] = '\0';
  return line;
}

int tj__parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (s == NULL || *s == '\0') return 0;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int safe_file_name(const char *name) {
  if (name[0] == '\0' || name[0] == '.' || strlen(name) >= NAME_SIZE) return 0;
  for (const char *p = name; *p; ++p)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '.' || *p == '_' || *p == '-'))
      return 0;
  return 1;
}

static const listed_file *listed(const manifest *m, const char *name) {
  for (int32_t i = 0; i < m->nfiles; ++i)
    if (strcmp(m->files[i].name, name) == 0) return &m->files[i];
  return NULL;
}

/* Reads listed file `f` whole and checks its size and SHA-256; the bytes stay in f->data. */
static int read_checked(const manifest *m, listed_file *f) {
  const char *name = f->name;
  char *data;
  int64_t size;
  int err = read_at(m->dirfd, name, &data, &size);
  if (err) return refuse(m, name, "cannot read it (%s)", unreadable(err));
  char digest[65];
  tj__sha256_hex(data, (size_t)size, digest);
  if (size != f->size || strcmp(digest, f->sha256) != 0) {
    free(data);
    if (size != f->size)
      return refuse(m, name, "%lld bytes, but MANIFEST lists %lld: the file was changed",
                    (long long)size, (long long)f->size);
    return refuse(m, name, "its SHA-256 is %s, but MANIFEST lists %s: the file was changed", digest,
                  f->sha256);
  }
  f->data = data;
  return TJ_OK;
}

static int read_manifest(manifest *m) {
  char *text;
  int64_t size;
  int err = read_at(m->dirfd, "MANIFEST", &text, &size);
  if (err)
    return refuse(m, "MANIFEST", "cannot read it (%s): is this a tilejit export directory?",
                  unreadable(err));
  int nul = tj__nul_line(text, size);
  if (nul) {
    free(text);
    return refuse(m, "MANIFEST", "line %d: a NUL byte", nul);
  }
  int rc;
  char *cursor = text, *line;
  int32_t number = 0;
  tj__line_tokens t;
  rc = TJ_OK;
  while (rc == TJ_OK && (line = tj__next_line(&cursor)) != NULL) {
    ++number;
    tj__split(line, line, &t);
    int64_t v;
    if (number == 1) {
      if (t.n != 2 || strcmp(t.tok[0], "tilejit-export") != 0 ||
          !tj__parse_int(t.tok[1], 0, 1 << 30, &v))
        rc = refuse(m, "MANIFEST", "line 1 is not 'tilejit-export <format version>'");
      else if (v != EXPORT_FORMAT)
        rc = refuse(m, "MANIFEST",
                    "export format version %lld; this tilejit (%s) reads version %d: load it "
                    "with the tilejit version that exported it, or export it again",
                    (long long)v, TJ_VERSION, EXPORT_FORMAT);
      continue;
    }
    if (t.n == 0 || t.tok[0][0] == '#') continue;
    const char *key = t.tok[0];
    int one_value =
        strcmp(key, "tilejit") == 0 || strcmp(key, "target") == 0 || strcmp(key, "arch") == 0;
    if ((one_value && t.n != 2) || (strcmp(key, "file") == 0 && t.n != 4)) {
      rc = refuse(m, "MANIFEST", "line %d: expected '%s'", number,
                  one_value ? (key[0] == 'a'   ? "arch <architecture>"
                               : key[1] == 'a' ? "target <cpu or cuda>"
                                               : "tilejit <version>")
                            : "file <name> <size> <sha256>");
      continue;
    }
    if (strcmp(key, "tilejit") == 0) continue; /* the exporting version */
    if (strcmp(key, "target") == 0 && strlen(t.tok[1]) < sizeof(m->target)) {
      strcpy(m->target, t.tok[1]);
    } else if (strcmp(key, "arch") == 0 && strlen(t.tok[1]) < sizeof(m->arch)) {
      strcpy(m->arch, t.tok[1]);
    } else if (strcmp(key, "file") == 0) {
      if (m->nfiles == MAX_FILES) {
        rc = refuse(m, "MANIFEST", "more than %d files", MAX_FILES);
      } else if (!safe_file_name(t.tok[1])) {
        rc = refuse(m, "MANIFEST", "line %d: '%s' is not a plain file name", number, t.tok[1]);
      } else if (listed(m, t.tok[1])) {
        rc = refuse(m, "MANIFEST", "line %d: '%s' is listed twice", number, t.tok[1]);
      } else if (!tj__parse_int(t.tok[2], 0, INT64_MAX, &v) || strlen(t.tok[3]) != 64 ||
                 strspn(t.tok[3], "0123456789abcdef") != 64) {
        rc = refuse(m, "MANIFEST", "line %d: expected 'file <name> <size> <sha256>'", number);
      } else {
        listed_file *f = &m->files[m->nfiles++];
        strcpy(f->name, t.tok[1]);
        f->size = v;
        strcpy(f->sha256, t.tok[3]);
      }
    } else {
      rc = refuse(m, "MANIFEST", "line %d: unknown entry '%s'", number, key);
    }
  }
  free(text);
  if (rc) return rc;
  if (number == 0) return refuse(m, "MANIFEST", "the file is empty");
  if (strcmp(m->target, "cpu") != 0 && strcmp(m->target, "cuda") != 0)
    return refuse(m, "MANIFEST", "target '%s'; expected cpu or cuda", m->target);
  return TJ_OK;
}

/* Whether an image built for `arch` ("sm_90a", "compute_80", "sm_80,sm_90")
 * runs on a device of compute capability major.minor. */
static int cuda_arch_runs(const char *arch, int32_t major, int32_t minor) {
  char copy[NAME_SIZE];
  snprintf(copy, sizeof(copy), "%s", arch);
  for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
    int ptx = strncmp(item, "compute_", 8) == 0;
    const char *digits = item + (ptx ? 8 : strncmp(item, "sm_", 3) == 0 ? 3 : 0);
    char *end;
    long number = strtol(digits, &end, 10);
    if (end == digits) return 1; /* not an arch tilejit writes: the driver decides */
    int exact = *end == 'a' || *end == 'f';
    int32_t want_major = (int32_t)(number / 10), want_minor = (int32_t)(number % 10);
    int32_t have = major * 10 + minor, want = want_major * 10 + want_minor;
    if (ptx ? have >= want : exact ? have == want : (major == want_major && minor >= want_minor))
      return 1;
  }
  return 0;
}

static int check_machine(const manifest *m) {
  if (strcmp(m->target, "cpu") == 0) {
    struct utsname host;
    if (m->arch[0] && uname(&host) == 0 && strcmp(host.machine, m->arch) != 0)
      return refuse(m, "MANIFEST", "a cpu kernel for %s; this machine is %s", m->arch,
                    host.machine);
    return TJ_OK;
  }
  int32_t major, minor;
  int rc = tj_cuda_device_capability(-1, &major, &minor);
  if (rc)
    return tj__prefix_error(
        TJ_EVALUE, "tilejit export %s: a cuda kernel, but no CUDA device is usable here: ", m->dir);
  if (!m->arch[0] || strcmp(m->arch, "unknown") == 0 || cuda_arch_runs(m->arch, major, minor))
    return TJ_OK;
  /* The current device cannot run it: another one may (a machine of mixed GPUs). */
  char seen[256] = "";
  size_t used = 0;
  for (int32_t device = 0; device < 64; ++device) {
    if (tj_cuda_device_capability(device, &major, &minor) != TJ_OK) break;
    if (cuda_arch_runs(m->arch, major, minor)) return TJ_OK;
    char one[16];
    snprintf(one, sizeof(one), "%d.%d", (int)major, (int)minor);
    if (strstr(seen, one) == NULL && used + strlen(one) + 3 < sizeof(seen))
      used += (size_t)snprintf(seen + used, sizeof(seen) - used, used ? ", %s" : "%s", one);
  }
  return refuse(m, "MANIFEST",
                "a cuda kernel built for %s, which does not run on this machine's devices "
                "(compute capability %s)",
                m->arch, seen);
}

/* ---- The signature file ----------------------------------------------------- */

typedef struct {
  manifest *m;
  tj_kernel *k;
  int32_t line;
  int32_t finalized;
  int32_t loaded;
  int32_t launches;
} replay;

static int bad(replay *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int bad(replay *r, const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  return refuse(r->m, SIGNATURE_FILE, "line %d: %s", (int)r->line, what);
}

/* Token `i` as an int in [lo, hi], else a refusal naming `what`. */
static int int_at(replay *r, const tj__line_tokens *t, int32_t i, int64_t lo, int64_t hi,
                  const char *what, int64_t *out) {
  if (i >= t->n) return bad(r, "'%s' ends before its %s", t->tok[0], what);
  if (!tj__parse_int(t->tok[i], lo, hi, out))
    return bad(r, "%s '%s' is not an integer in [%lld, %lld]", what, t->tok[i], (long long)lo,
               (long long)hi);
  return TJ_OK;
}

static int i32_at(replay *r, const tj__line_tokens *t, int32_t i, const char *what, int32_t *out) {
  int64_t v;
  int rc = int_at(r, t, i, INT32_MIN, INT32_MAX, what, &v);
  if (rc == TJ_OK) *out = (int32_t)v;
  return rc;
}

/* A dtype written code:bits:lanes. */
static int dtype_at(replay *r, const tj__line_tokens *t, int32_t i, DLDataType *out) {
  unsigned code, bits, lanes;
  char tail;
  if (i >= t->n) return bad(r, "'%s' ends before its dtype", t->tok[0]);
  if (sscanf(t->tok[i], "%u:%u:%u%c", &code, &bits, &lanes, &tail) != 3 || code > 255 ||
      bits > 255 || lanes > 65535)
    return bad(r, "dtype '%s' is not code:bits:lanes", t->tok[i]);
  out->code = (uint8_t)code;
  out->bits = (uint8_t)bits;
  out->lanes = (uint16_t)lanes;
  return TJ_OK;
}

static int ids_at(replay *r, const tj__line_tokens *t, int32_t first, int32_t n, const char *what,
                  int32_t *out) {
  for (int32_t j = 0; j < n; ++j) {
    int rc = i32_at(r, t, first + j, what, &out[j]);
    if (rc) return rc;
  }
  return TJ_OK;
}

/* N (source index dtype) triples from token `first`; *next: the token after. */
static int abi_at(replay *r, const tj__line_tokens *t, int32_t first, tj_abi_arg *args, int32_t *n,
                  int32_t *next) {
  int64_t count;
  int rc = int_at(r, t, first, 0, TJ_MAX_PARAMS + TJ_MAX_SYMBOLS + 64, "argument count", &count);
  if (rc) return rc;
  for (int32_t j = 0; j < (int32_t)count; ++j) {
    int32_t at = first + 1 + 3 * j;
    if ((rc = i32_at(r, t, at, "argument source", &args[j].source)) ||
        (rc = i32_at(r, t, at + 1, "argument index", &args[j].index)) ||
        (rc = dtype_at(r, t, at + 2, &args[j].dtype)))
      return rc;
  }
  *n = (int32_t)count;
  *next = first + 1 + 3 * (int32_t)count;
  return TJ_OK;
}

static int expect_tokens(replay *r, const tj__line_tokens *t, int32_t n) {
  if (t->n != n)
    return bad(r, "'%s' takes %d fields, found %d", t->tok[0], (int)n - 1, (int)t->n - 1);
  return TJ_OK;
}

/* A builder's refusal, prefixed with where it comes from. */
static int built(replay *r, int rc) {
  if (rc == TJ_OK) return rc;
  return tj__prefix_error(rc == TJ_ENOMEM ? rc : TJ_EVALUE,
                          "tilejit export %s: %s: line %d: ", r->m->dir, SIGNATURE_FILE,
                          (int)r->line);
}

/* The checked bytes of listed file `f` written to `dir`/NAME (a private
 * directory), for dlopen: the library is loaded from the bytes that were
 * checked, so a later change at the export's path cannot reach the loaded
 * kernel, and two opens never share one dlopen handle. */
static int private_copy(replay *r, const char *dir, const listed_file *f, char *path, size_t size) {
  if ((size_t)snprintf(path, size, "%s/%s", dir, f->name) >= size)
    return refuse(r->m, f->name, "the temporary path is too long");
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  int64_t done = 0;
  while (fd >= 0 && done < f->size) {
    ssize_t wrote = write(fd, f->data + done, (size_t)(f->size - done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    done += wrote;
  }
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && done == f->size) err = errno, done = -1;
  if (fd < 0 || done != f->size)
    return refuse(r->m, f->name, "cannot write its private copy %s (%s)", path,
                  strerror(err ? err : EIO));
  return TJ_OK;
}

/* Loads the image(s) from their checked bytes: a CUDA image as its bytes; a CPU
 * library through a private copy, removed once it is loaded. */
static int load_checked(replay *r, const tj__line_tokens *t, int prebuilt) {
  const listed_file *image = listed(r->m, t->tok[1]);
  if (r->k->target == TJ_TARGET_CUDA && !prebuilt) {
    if (image->size == 0) return bad(r, "the image file '%s' is empty", image->name);
    return built(r, tj_kernel_set_image(r->k, image->data, image->size, t->tok[2]));
  }
  char dir[4096], image_path[4096], library_path[4096] = "";
  if ((size_t)snprintf(dir, sizeof(dir), "%s/tilejit-load-XXXXXX", tj__env_tmpdir()) >=
          sizeof(dir) ||
      mkdtemp(dir) == NULL)
    return refuse(r->m, image->name, "cannot make a private directory to load it from (%s)",
                  strerror(errno));
  int rc = private_copy(r, dir, image, image_path, sizeof(image_path));
  if (rc == TJ_OK && prebuilt)
    rc = private_copy(r, dir, listed(r->m, t->tok[3]), library_path, sizeof(library_path));
  if (rc == TJ_OK)
    rc = built(
        r, prebuilt ? tj_kernel_load_prebuilt(r->k, image_path, t->tok[2], library_path, t->tok[4])
                    : tj_kernel_load(r->k, image_path, t->tok[2]));
  unlink(image_path);
  if (library_path[0]) unlink(library_path);
  rmdir(dir);
  return rc;
}

/* ---- What the file says beyond the builder calls ----------------------------- */

static int out_of_memory(replay *r) {
  return tj_set_error(TJ_ENOMEM, "tilejit export %s: out of memory", r->m->dir);
}

/* out_idx N PARAM...: the outputs in the order a call returns them. */
static int out_idx_line(replay *r, const tj__line_tokens *t) {
  described *d = &r->m->said;
  int64_t n;
  int rc;
  if (d->nout >= 0) return bad(r, "a second out_idx line");
  if ((rc = int_at(r, t, 1, 0, TJ_MAX_OUTPUTS, "output count", &n)) ||
      (rc = expect_tokens(r, t, 2 + (int32_t)n)))
    return rc;
  for (int32_t i = 0; i < (int32_t)n; ++i) {
    int64_t param;
    if ((rc = int_at(r, t, 2 + i, 0, r->k->nparams - 1, "output parameter", &param))) return rc;
    for (int32_t j = 0; j < i; ++j)
      if (d->out_idx[j] == param) return bad(r, "out_idx names parameter %d twice", (int)param);
    d->out_idx[i] = (int32_t)param;
  }
  d->nout = (int32_t)n;
  d->out_line = r->line;
  return TJ_OK;
}

/* out_idx, once the kernel is built: the output buffers, each once. */
static int check_out_idx(replay *r) {
  const described *d = &r->m->said;
  if (d->nout < 0) return TJ_OK;
  int64_t listed_params[TJ_MAX_OUTPUTS], outputs[TJ_MAX_OUTPUTS];
  int32_t noutputs = tj_kernel_num_outputs(r->k), same = noutputs == d->nout;
  for (int32_t i = 0; i < d->nout; ++i) {
    listed_params[i] = d->out_idx[i];
    same = same && r->k->params[d->out_idx[i]].output >= 0 &&
           r->k->params[d->out_idx[i]].output < noutputs;
  }
  if (same) return TJ_OK;
  for (int32_t i = 0; i < noutputs; ++i) outputs[i] = tj_kernel_output_param(r->k, i);
  char said[256], are[256];
  tj__format_tuple(listed_params, d->nout, said, sizeof(said));
  tj__format_tuple(outputs, noutputs, are, sizeof(are));
  r->line = d->out_line;
  return bad(r, "out_idx %s does not list the output buffers %s", said, are);
}

/* function NAME PROTOTYPE: a kernel function as kernel.h declares it. */
static int function_line(replay *r, const tj__line_tokens *t) {
  described *d = &r->m->said;
  if (t->n < 3) return bad(r, "'function' takes a name and a prototype");
  if (d->nfunctions == TJ_MAX_LAUNCHES) return bad(r, "more than %d functions", TJ_MAX_LAUNCHES);
  tj_export_function *fn = &d->functions[d->nfunctions];
  memset(fn, 0, sizeof(*fn));
  ++d->nfunctions;
  fn->name = strdup(t->tok[1]);
  fn->prototype = strdup(t->rest[2]);
  fn->args = calloc(TJ_MAX_ABI_ARGS, sizeof(*fn->args));
  return fn->name && fn->prototype && fn->args ? TJ_OK : out_of_memory(r);
}

/* A 0 or 1 field. */
static int flag_at(replay *r, const tj__line_tokens *t, int32_t i, const char *what, int32_t *out) {
  int64_t v;
  int rc = int_at(r, t, i, 0, 1, what, &v);
  if (rc == TJ_OK) *out = (int32_t)v;
  return rc;
}

/* arg NAME SOURCE INDEX DTYPE POINTER CONST PARAM: an argument of the function above. */
static int arg_line(replay *r, const tj__line_tokens *t) {
  described *d = &r->m->said;
  if (d->nfunctions == 0) return bad(r, "'arg' before any 'function' line");
  tj_export_function *fn = &d->functions[d->nfunctions - 1];
  if (fn->nargs == TJ_MAX_ABI_ARGS) return bad(r, "more than %d arguments", TJ_MAX_ABI_ARGS);
  tj_export_arg a;
  int64_t source, index, param;
  int rc;
  if ((rc = expect_tokens(r, t, 8)) ||
      (rc = int_at(r, t, 2, TJ_ABI_PARAM, TJ_ABI_TENSORMAP, "argument source", &source)) ||
      (rc = int_at(r, t, 3, 0, INT32_MAX, "argument index", &index)) ||
      (rc = flag_at(r, t, 5, "pointer", &a.pointer)) ||
      (rc = flag_at(r, t, 6, "const", &a.is_const)) ||
      (rc = int_at(r, t, 7, -1, r->k->nparams - 1, "parameter", &param)))
    return rc;
  /* What it passes is declared above it; a parameter names itself. */
  const tj_kernel *k = r->k;
  const int32_t declared[] = {k->nparams, k->nsymbols, k->nexprs, k->ntensormaps};
  static const char *const what[] = {"parameter", "symbol", "expression", "tensor map"};
  if (index >= declared[source - 1])
    return bad(r, "argument '%s' passes %s %lld, but %d are declared above it", t->tok[1],
               what[source - 1], (long long)index, (int)declared[source - 1]);
  if (param != (source == TJ_ABI_PARAM ? index : -1))
    return bad(r, "argument '%s': parameter %lld, expected %lld", t->tok[1], (long long)param,
               (long long)(source == TJ_ABI_PARAM ? index : -1));
  a.source = (int32_t)source;
  a.index = (int32_t)index;
  a.param = (int32_t)param;
  a.name = strdup(t->tok[1]);
  a.dtype = strdup(t->tok[4]);
  ((tj_export_arg *)fn->args)[fn->nargs++] = a;
  return a.name && a.dtype ? TJ_OK : out_of_memory(r);
}

/* The load line's files and symbols. */
static int keep_load(replay *r, const tj__line_tokens *t) {
  tj_export_load *load = &r->m->said.load;
  load->image = strdup(t->tok[1]);
  load->entry = strdup(t->tok[2]);
  if (t->n == 5) {
    load->library = strdup(t->tok[3]);
    load->symbol = strdup(t->tok[4]);
  }
  int kept = load->image && load->entry && (t->n != 5 || (load->library && load->symbol));
  return kept ? TJ_OK : out_of_memory(r);
}

static int load_line(replay *r, const tj__line_tokens *t) {
  if (r->loaded) return bad(r, "a second load line");
  int rc = built(r, tj_kernel_finalize(r->k));
  if (rc) return rc;
  r->finalized = 1;
  int prebuilt = strcmp(t->tok[0], "load_prebuilt") == 0;
  if ((rc = expect_tokens(r, t, prebuilt ? 5 : 3))) return rc;
  for (int32_t i = 1; i < t->n; i += 2) {
    if (!listed(r->m, t->tok[i]))
      return bad(r, "'%s' names file '%s', which MANIFEST does not list", t->tok[0], t->tok[i]);
  }
  if ((rc = check_out_idx(r)) || (rc = load_checked(r, t, prebuilt)) || (rc = keep_load(r, t)))
    return rc;
  r->loaded = 1;
  return TJ_OK;
}

/* kernel NAME TARGET NPARAMS: the first entry. */
static int kernel_line(replay *r, const tj__line_tokens *t) {
  int rc;
  int64_t nparams;
  if ((rc = expect_tokens(r, t, 4)) ||
      (rc = int_at(r, t, 3, 0, TJ_MAX_PARAMS, "parameter count", &nparams)))
    return rc;
  int32_t target = strcmp(t->tok[2], "cpu") == 0    ? TJ_TARGET_CPU
                   : strcmp(t->tok[2], "cuda") == 0 ? TJ_TARGET_CUDA
                                                    : 0;
  if (target == 0 || strcmp(t->tok[2], r->m->target) != 0)
    return bad(r, "target '%s', but MANIFEST says '%s'", t->tok[2], r->m->target);
  return built(r, tj_kernel_create(t->tok[1], (int32_t)nparams, target, &r->k));
}

/* symbol NAME DIVISIBILITY DTYPE */
static int symbol_line(replay *r, const tj__line_tokens *t) {
  int rc;
  int64_t v;
  DLDataType dtype;
  if ((rc = expect_tokens(r, t, 4)) || (rc = int_at(r, t, 2, 1, INT64_MAX, "divisibility", &v)) ||
      (rc = dtype_at(r, t, 3, &dtype)))
    return rc;
  if ((rc = built(r, tj_kernel_add_symbol(r->k, t->tok[1], v)))) return rc;
  if (dtype.code == kDLInt && dtype.bits == 64 && dtype.lanes == 1) return TJ_OK;
  return built(r, tj_kernel_set_symbol_dtype(r->k, tj_kernel_num_symbols(r->k) - 1, dtype));
}

/* expr PAIRS OP OPERAND ... TEXT */
static int expr_line(replay *r, const tj__line_tokens *t) {
  int rc;
  int64_t pairs, code[2 * 256];
  if ((rc = int_at(r, t, 1, 1, 256, "operation count", &pairs))) return rc;
  for (int32_t j = 0; j < 2 * (int32_t)pairs; ++j)
    if ((rc = int_at(r, t, 2 + j, INT64_MIN, INT64_MAX, "operation", &code[j]))) return rc;
  int32_t text_at = 2 + 2 * (int32_t)pairs, id;
  const char *text = text_at < t->n ? t->rest[text_at] : "";
  return built(r, tj_kernel_add_expr(r->k, code, (int32_t)pairs, text, &id));
}

/* scalar INDEX NAME DTYPE [SYMBOL IT BINDS] */
static int scalar_line(replay *r, const tj__line_tokens *t, int32_t index, DLDataType dtype) {
  int rc;
  int32_t symbol = -1;
  if (t->n != 5 && (rc = expect_tokens(r, t, 4))) return rc;
  if (t->n == 5 && (rc = i32_at(r, t, 4, "symbol", &symbol))) return rc;
  if ((rc = built(r, tj_kernel_set_scalar(r->k, index, t->tok[2], dtype))) || symbol < 0) return rc;
  return built(r, tj_kernel_set_scalar_symbol(r->k, index, symbol));
}

/* buffer, scalar or pointer INDEX NAME DTYPE ...: a parameter. */
static int param_line(replay *r, const tj__line_tokens *t) {
  const char *key = t->tok[0];
  int rc;
  int32_t index, ndim = 0, shape[TJ_MAX_NDIM], strides[TJ_MAX_NDIM];
  int64_t align = 0, flags = 0;
  DLDataType dtype;
  if ((rc = i32_at(r, t, 1, "parameter index", &index)) || (rc = dtype_at(r, t, 3, &dtype)))
    return rc;
  if (key[0] == 's') return scalar_line(r, t, index, dtype);
  if ((rc = int_at(r, t, 4, 0, INT64_MAX, "align", &align)) ||
      (rc = int_at(r, t, 5, 0, UINT32_MAX, "flags", &flags)))
    return rc;
  if (key[0] == 'p') {
    if ((rc = expect_tokens(r, t, 6))) return rc;
    return built(r, tj_kernel_set_pointer(r->k, index, t->tok[2], dtype, align, (uint32_t)flags));
  }
  int64_t n;
  if ((rc = int_at(r, t, 6, 0, TJ_MAX_NDIM, "dimension count", &n))) return rc;
  ndim = (int32_t)n;
  if ((rc = ids_at(r, t, 7, ndim, "shape expression", shape))) return rc;
  int32_t at = 7 + ndim, has_strides = !(at < t->n && strcmp(t->tok[at], "-") == 0);
  if ((rc = expect_tokens(r, t, has_strides ? at + ndim : at + 1))) return rc;
  if (has_strides && (rc = ids_at(r, t, at, ndim, "stride expression", strides))) return rc;
  return built(r, tj_kernel_set_buffer(r->k, index, t->tok[2], dtype, ndim, shape,
                                       has_strides ? strides : NULL, align, (uint32_t)flags));
}

/* The fields of a tensor map after its rank, from token `at`: dims, strides,
 * then box (tiled) or the im2col fields, element strides and the four flags. */
static int tensormap_fields(replay *r, const tj__line_tokens *t, int32_t at, tj_tensormap *map) {
  int rc;
  int32_t n = map->rank;
  const int32_t fields = map->im2col ? 3 * n - 1 + 2 * (n - 2) + 2 : 4 * n - 1;
  if ((rc = expect_tokens(r, t, at + fields + 4)) ||
      (rc = ids_at(r, t, at, n, "dimension", map->dims)) ||
      (rc = ids_at(r, t, at + n, n - 1, "stride", map->strides)))
    return rc;
  at += 2 * n - 1;
  if (!map->im2col) {
    if ((rc = ids_at(r, t, at, n, "box", map->box))) return rc;
    at += n;
  }
  if ((rc = ids_at(r, t, at, n, "element stride", map->element_strides))) return rc;
  at += n;
  if (map->im2col) {
    if ((rc = ids_at(r, t, at, n - 2, "lower corner", map->lower_corner)) ||
        (rc = ids_at(r, t, at + n - 2, n - 2, "upper corner", map->upper_corner)) ||
        (rc = i32_at(r, t, at + 2 * (n - 2), "channels per pixel", &map->channels_per_pixel)) ||
        (rc = i32_at(r, t, at + 2 * (n - 2) + 1, "pixels per column", &map->pixels_per_column)))
      return rc;
    at += 2 * (n - 2) + 2;
  }
  if ((rc = i32_at(r, t, at, "interleave", &map->interleave)) ||
      (rc = i32_at(r, t, at + 1, "swizzle", &map->swizzle)) ||
      (rc = i32_at(r, t, at + 2, "l2 promotion", &map->l2_promotion)) ||
      (rc = i32_at(r, t, at + 3, "oob fill", &map->oob_fill)))
    return rc;
  return TJ_OK;
}

/* tensormap NAME PARAM TYPE RANK dims strides box element_strides FLAGS4;
 * tensormap_im2col NAME PARAM TYPE RANK dims strides element_strides lower upper
 * channels pixels FLAGS4 */
static int tensormap_line(replay *r, const tj__line_tokens *t) {
  tj_tensormap map;
  memset(&map, 0, sizeof(map));
  map.name = t->tok[1];
  map.im2col = t->tok[0][9] == '_';
  int64_t rank;
  int rc;
  if ((rc = i32_at(r, t, 2, "parameter", &map.param)) ||
      (rc = i32_at(r, t, 3, "data type", &map.data_type)) ||
      (rc = int_at(r, t, 4, map.im2col ? 3 : 1, TJ_MAX_TENSORMAP_RANK, "rank", &rank)))
    return rc;
  map.rank = (int32_t)rank;
  if ((rc = tensormap_fields(r, t, 5, &map))) return rc;
  int32_t id;
  return built(r, tj_kernel_add_tensormap(r->k, &map, &id));
}

/* abi ARGS..., or launch SYMBOL GRID3 BLOCK3 SHARED ARGS...: the kernel
 * function's arguments, and each CUDA launch. */
static int launch_line(replay *r, const tj__line_tokens *t) {
  static _Thread_local tj_abi_arg args[TJ_MAX_PARAMS + TJ_MAX_SYMBOLS + 64];
  int32_t n, next, grid[3], block[3], shared;
  int rc;
  if (t->tok[0][0] == 'a') {
    if ((rc = abi_at(r, t, 1, args, &n, &next)) || (rc = expect_tokens(r, t, next))) return rc;
    return built(r, tj_kernel_set_abi(r->k, n, args));
  }
  if ((rc = ids_at(r, t, 2, 3, "grid expression", grid)) ||
      (rc = ids_at(r, t, 5, 3, "block expression", block)) ||
      (rc = i32_at(r, t, 8, "shared memory expression", &shared)) ||
      (rc = abi_at(r, t, 9, args, &n, &next)) || (rc = expect_tokens(r, t, next)))
    return rc;
  if (r->launches++ == 0) return built(r, tj_kernel_set_launch(r->k, grid, block, shared));
  int32_t id;
  return built(r, tj_kernel_add_launch(r->k, t->tok[1], grid, block, shared, n, args, &id));
}

/* launch_attrs INDEX (CLUSTER3 | -) FLAGS */
static int launch_attrs_line(replay *r, const tj__line_tokens *t) {
  int32_t index, cluster[3];
  int64_t v;
  int rc;
  int has_cluster = t->n > 2 && strcmp(t->tok[2], "-") != 0;
  if ((rc = expect_tokens(r, t, has_cluster ? 6 : 4)) ||
      (rc = i32_at(r, t, 1, "launch index", &index)) ||
      (has_cluster && (rc = ids_at(r, t, 2, 3, "cluster expression", cluster))) ||
      (rc = int_at(r, t, has_cluster ? 5 : 3, 0, UINT32_MAX, "flags", &v)))
    return rc;
  return built(r,
               tj_kernel_set_launch_attrs(r->k, index, has_cluster ? cluster : NULL, (uint32_t)v));
}

static int replay_line(replay *r, tj__line_tokens *t) {
  const char *key = t->tok[0];
  if (r->k == NULL) {
    if (strcmp(key, "kernel") != 0) return bad(r, "expected the 'kernel' line first");
    return kernel_line(r, t);
  }
  if (r->finalized) return bad(r, "'%s' after the load line", key);
  if (strcmp(key, "out_idx") == 0) return out_idx_line(r, t);
  if (strcmp(key, "function") == 0) return function_line(r, t);
  if (strcmp(key, "arg") == 0) return arg_line(r, t);
  if (strcmp(key, "symbol") == 0) return symbol_line(r, t);
  if (strcmp(key, "expr") == 0) return expr_line(r, t);
  if (strcmp(key, "buffer") == 0 || strcmp(key, "scalar") == 0 || strcmp(key, "pointer") == 0)
    return param_line(r, t);
  if (strcmp(key, "tensormap") == 0 || strcmp(key, "tensormap_im2col") == 0)
    return tensormap_line(r, t);
  if (strcmp(key, "abi") == 0 || strcmp(key, "launch") == 0) return launch_line(r, t);
  if (strcmp(key, "launch_attrs") == 0) return launch_attrs_line(r, t);
  if (strcmp(key, "load") == 0 || strcmp(key, "load_prebuilt") == 0) return load_line(r, t);
  return bad(r, "unknown entry '%s'", key);
}

/* The offset of the first byte of `s` that starts no well-formed UTF-8
 * sequence (an overlong form, a surrogate, beyond U+10FFFF, cut short), or -1. */
static int64_t not_utf8_at(const unsigned char *s) {
  for (int64_t i = 0; s[i];) {
    unsigned c = s[i], lo = 0x80, hi = 0xBF;
    int64_t len = c < 0x80                 ? 1
                  : c >= 0xC2 && c <= 0xDF ? 2
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xF0 && c <= 0xF4 ? 4
                                           : 0;
    if (len == 0) return i;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    for (int64_t j = 1; j < len; ++j, lo = 0x80, hi = 0xBF)
      if (s[i + j] < lo || s[i + j] > hi) return i;
    i += len;
  }
  return -1;
}

/* One line of signature.tj: the header on line 1, else an entry (comments skipped). */
static int replay_text_line(replay *r, char *line) {
  tj__line_tokens t;
  char *whole = strdup(line);
  if (whole == NULL) return tj_set_error(TJ_ENOMEM, "tilejit export %s: out of memory", r->m->dir);
  tj__split(line, whole, &t);
  int rc = TJ_OK;
  int64_t v, at = t.n > 0 && t.tok[0][0] == '#' ? -1 : not_utf8_at((const unsigned char *)whole);
  if (at >= 0) { /* every string the kernel keeps is text a binding can decode */
    rc = bad(r, "byte %#04x at column %lld is not UTF-8 (only comment lines may hold other bytes)",
             (unsigned)(unsigned char)whole[at], (long long)at + 1);
  } else if (r->line == 1) {
    if (t.n != 2 || strcmp(t.tok[0], "tilejit-signature") != 0 ||
        !tj__parse_int(t.tok[1], 0, 1 << 30, &v))
      rc = bad(r, "not 'tilejit-signature <format version>'");
    else if (v != SIGNATURE_FORMAT)
      rc = bad(r, "signature format version %lld; this tilejit (%s) reads version %d", (long long)v,
               TJ_VERSION, SIGNATURE_FORMAT);
  } else if (t.n == TJ__MAX_TOKENS) {
    rc = bad(r, "more than %d fields", TJ__MAX_TOKENS - 1);
  } else if (t.n > 0 && t.tok[0][0] != '#') {
    rc = replay_line(r, &t);
  }
  free(whole);
  return rc;
}

/* Builds the kernel from the checked signature.tj (replayed from a copy: the
 * kept bytes stay as read) and keeps `m` with it. */
static int replay_signature(manifest *m, tj_kernel **out) {
  const listed_file *f = listed(m, SIGNATURE_FILE);
  replay r = {m, NULL, 0, 0, 0, 0};
  int nul = tj__nul_line(f->data, f->size);
  if (nul) return refuse(m, SIGNATURE_FILE, "line %d: a NUL byte", nul);
  char *text = malloc((size_t)f->size + 1);
  if (text == NULL) return tj_set_error(TJ_ENOMEM, "tilejit export %s: out of memory", m->dir);
  memcpy(text, f->data, (size_t)f->size + 1);
  char *cursor = text, *line;
  int rc = TJ_OK;
  while (rc == TJ_OK && (line = tj__next_line(&cursor)) != NULL) {
    ++r.line;
    rc = replay_text_line(&r, line);
  }
  free(text);
  if (rc == TJ_OK && !r.loaded) rc = bad(&r, "the file ends before its load line");
  if (rc) {
    tj_kernel_free(r.k);
    return rc;
  }
  r.k->opened = m;
  r.k->opened_free = manifest_free;
  *out = r.k;
  return TJ_OK;
}

/* One read of the export: the directory opened once, MANIFEST and every file it
 * lists read from it and checked. *id: the directory read, once it is open. */
static int read_export(manifest *m, struct stat *id) {
  m->dirfd = open(m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (m->dirfd < 0 || fstat(m->dirfd, id) != 0)
    return refuse(m, "MANIFEST", "cannot read it (%s): is this a tilejit export directory?",
                  strerror(errno));
  int rc = read_manifest(m);
  /* Every listed file first: nothing is built from an export any file of which is damaged. */
  for (int32_t i = 0; i < m->nfiles && rc == TJ_OK; ++i) rc = read_checked(m, &m->files[i]);
  if (rc == TJ_OK && listed(m, SIGNATURE_FILE) == NULL)
    rc = refuse(m, "MANIFEST", "no %s is listed", SIGNATURE_FILE);
  close(m->dirfd);
  m->dirfd = -1;
  return rc;
}

/* Whether `dir` no longer names the directory `id` (another export was moved there). */
static int replaced(const char *dir, const struct stat *id) {
  struct stat now;
  if (stat(dir, &now) != 0) {
    struct timespec pause = {0, 1000000}; /* between the two renames of a replacement */
    nanosleep(&pause, NULL);
    return 1;
  }
  return now.st_dev != id->st_dev || now.st_ino != id->st_ino;
}

int tj_kernel_open(const char *dir, tj_kernel **out) {
  if (dir == NULL || out == NULL) return tj_set_error(TJ_EVALUE, "tj_kernel_open: NULL argument");
  *out = NULL;
  /* A directory replaced whole while it is read (kernel.export(path, overwrite=True)
   * in another process) is read again: the kernel is the old export or the new one. */
  for (int attempt = 1;; ++attempt) {
    manifest *m = manifest_new(dir);
    if (m == NULL) return tj_set_error(TJ_ENOMEM, "tilejit export %s: out of memory", dir);
    struct stat id;
    memset(&id, 0, sizeof(id));
    int rc = read_export(m, &id);
    if (rc != TJ_OK && id.st_ino != 0 && replaced(dir, &id)) {
      manifest_free(m);
      if (attempt < OPEN_ATTEMPTS) continue;
      return tj__prefix_error(TJ_EVALUE,
                              "tilejit export %s: the directory was replaced while it was read, "
                              "%d times; try again. The last read: ",
                              dir, OPEN_ATTEMPTS);
    }
    if (rc == TJ_OK) rc = check_machine(m);
    if (rc == TJ_OK) rc = replay_signature(m, out); /* m is the kernel's from here */
    if (rc != TJ_OK) manifest_free(m);
    return rc;
  }
}

int tj_kernel_reopen(const tj_kernel *kernel, tj_kernel **out) {
  if (kernel == NULL || out == NULL)
    return tj_set_error(TJ_EVALUE, "tj_kernel_reopen: NULL argument");
  *out = NULL;
  const manifest *kept = kernel->opened;
  if (kept == NULL)
    return tj_set_error(TJ_EVALUE, "%s: tj_kernel_reopen: the kernel was not opened from an export",
                        kernel->name);
  manifest *m = manifest_new(kept->dir);
  if (m == NULL) return tj_set_error(TJ_ENOMEM, "out of memory");
  memcpy(m->target, kept->target, sizeof(m->target));
  memcpy(m->arch, kept->arch, sizeof(m->arch));
  for (int32_t i = 0; i < kept->nfiles; ++i) {
    m->files[i] = kept->files[i];
    m->files[i].data = malloc((size_t)kept->files[i].size + 1);
    m->nfiles = i + 1;
    if (m->files[i].data == NULL) {
      manifest_free(m);
      return tj_set_error(TJ_ENOMEM, "out of memory");
    }
    memcpy(m->files[i].data, kept->files[i].data, (size_t)kept->files[i].size + 1);
  }
  int rc = replay_signature(m, out);
  if (rc != TJ_OK) manifest_free(m);
  return rc;
}

int32_t tj_kernel_export_num_files(const tj_kernel *kernel) {
  const manifest *m = kernel ? kernel->opened : NULL;
  return m ? m->nfiles : 0;
}

int tj_kernel_export_file(const tj_kernel *kernel, int32_t i, const char **name, const void **data,
                          int64_t *size, const char **sha256) {
  const manifest *m = kernel ? kernel->opened : NULL;
  if (m == NULL || i < 0 || i >= m->nfiles)
    return tj_set_error(TJ_EVALUE, "tj_kernel_export_file: no file %d", (int)i);
  const listed_file *f = &m->files[i];
  if (name) *name = f->name;
  if (data) *data = f->data;
  if (size) *size = f->size;
  if (sha256) *sha256 = f->sha256;
  return TJ_OK;
}

const char *tj_kernel_export_arch(const tj_kernel *kernel) {
  const manifest *m = kernel ? kernel->opened : NULL;
  return m ? m->arch : NULL;
}

/* What the export a kernel was opened from says, else NULL and a refusal
 * naming the kernel (or saying it is NULL). */
static const described *said_of(const tj_kernel *kernel) {
  if (kernel == NULL) {
    tj_set_error(TJ_EVALUE, "tj_kernel_export_*: kernel is NULL");
    return NULL;
  }
  const manifest *m = kernel->opened;
  if (m == NULL)
    tj_set_error(TJ_EVALUE, "%s: the kernel was not opened from an export", kernel->name);
  return m ? &m->said : NULL;
}

int tj_kernel_export_out_idx(const tj_kernel *kernel, int32_t *n, const int32_t **out_idx) {
  const described *d = said_of(kernel);
  if (d == NULL) return TJ_EVALUE;
  *n = d->nout;
  *out_idx = d->nout >= 0 ? d->out_idx : NULL;
  return TJ_OK;
}

int32_t tj_kernel_export_num_functions(const tj_kernel *kernel) {
  const manifest *m = kernel ? kernel->opened : NULL;
  return m ? m->said.nfunctions : 0;
}

int tj_kernel_export_function(const tj_kernel *kernel, int32_t i, tj_export_function *out) {
  const described *d = said_of(kernel);
  if (d == NULL) return TJ_EVALUE;
  if (i < 0 || i >= d->nfunctions)
    return tj_set_error(TJ_EVALUE, "%s: function %d out of range [0, %d)", kernel->name, (int)i,
                        (int)d->nfunctions);
  *out = d->functions[i];
  return TJ_OK;
}

int tj_kernel_export_load(const tj_kernel *kernel, tj_export_load *out) {
  const described *d = said_of(kernel);
  if (d == NULL) return TJ_EVALUE;
  *out = d->load;
  return TJ_OK;
}
