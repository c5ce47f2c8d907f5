/* Helpers shared by the test programs (see testutil.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "testutil.h"

/* ---- assertions ---------------------------------------------------------- */

void tu_assert_bytes(const void *got, size_t got_size, const void *want,
                     size_t want_size, const char *what) {
  if (got_size != want_size)
    fail_msg("%s: got %zu bytes, expected %zu", what, got_size, want_size);
  if (want_size == 0) return;
  if (got == NULL) fail_msg("%s: NULL data for %zu bytes", what, got_size);
  if (memcmp(got, want, want_size) == 0) return;
  const unsigned char *g = got, *w = want;
  for (size_t i = 0; i < want_size; i++)
    if (g[i] != w[i])
      fail_msg("%s: byte %zu of %zu differs: got 0x%02x, expected 0x%02x",
               what, i, want_size, g[i], w[i]);
}

/* ---- paths and files ------------------------------------------------------ */

char *tu_format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) fail_msg("out of memory formatting %s", fmt);
  return s;
}

char *tu_join(const char *dir, const char *name) {
  return tu_format("%s/%s", dir, name);
}

/* Every directory tu_tempdir made, removed again at exit: a failing test
 * leaves the test function before its own cleanup.  (Forked children leave
 * with _exit and never run this.) */
static char **made_dirs;
static size_t n_made_dirs;
static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;

static void remove_made_dirs(void) {
  for (size_t i = 0; i < n_made_dirs; i++) {
    tu_rmtree(made_dirs[i]);
    free(made_dirs[i]);
  }
  free(made_dirs);
  made_dirs = NULL;
  n_made_dirs = 0;
}

char *tu_tempdir(void) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  char *path = tu_format("%s/bctest-XXXXXX", base);
  if (mkdtemp(path) == NULL) fail_msg("mkdtemp %s: %s", path, strerror(errno));
  pthread_mutex_lock(&made_lock);
  if (made_dirs == NULL) atexit(remove_made_dirs);
  char **more = realloc(made_dirs, (n_made_dirs + 1) * sizeof *more);
  if (more != NULL) {
    made_dirs = more;
    made_dirs[n_made_dirs] = strdup(path);
    if (made_dirs[n_made_dirs] != NULL) n_made_dirs++;
  }
  pthread_mutex_unlock(&made_lock);
  return path;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP)
    rmdir(path);
  else
    unlink(path);
  return 0;
}

void tu_rmtree(const char *dir) {
  if (dir == NULL) return;
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

unsigned char *tu_read_file_opt(const char *path, size_t *size) {
  unsigned char *data = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NULL;
    fail_msg("open %s: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) fail_msg("fstat %s: %s", path, strerror(errno));
  size_t n = (size_t)st.st_size;
  data = malloc(n + 1);
  if (data == NULL) fail_msg("out of memory reading %s", path);
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, data + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail_msg("read %s: %s", path, r < 0 ? strerror(errno) : "short");
    done += (size_t)r;
  }
  close(fd);
  data[n] = 0;
  *size = n;
  return data;
}

unsigned char *tu_read_file(const char *path, size_t *size) {
  unsigned char *data = tu_read_file_opt(path, size);
  if (data == NULL) fail_msg("%s does not exist", path);
  return data;
}

void tu_write_file(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_msg("create %s: %s", path, strerror(errno));
  const unsigned char *p = data;
  while (size > 0) {
    ssize_t w = write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail_msg("write %s: %s", path, strerror(errno));
    p += w;
    size -= (size_t)w;
  }
  if (close(fd) != 0) fail_msg("close %s: %s", path, strerror(errno));
}

bool tu_exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Visits the entries of dir whose names start with prefix; removes them
 * when `remove` is set.  Returns the number visited. */
static size_t scan_entries(const char *dir, const char *prefix, bool remove) {
  DIR *d = opendir(dir);
  if (d == NULL) fail_msg("opendir %s: %s", dir, strerror(errno));
  size_t count = 0, plen = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (strncmp(e->d_name, prefix, plen) != 0) continue;
    count++;
    if (remove) {
      char *p = tu_join(dir, e->d_name);
      unlink(p);
      free(p);
    }
  }
  closedir(d);
  return count;
}

size_t tu_count_entries(const char *dir, const char *prefix) {
  return scan_entries(dir, prefix, false);
}

size_t tu_remove_entries(const char *dir, const char *prefix) {
  return scan_entries(dir, prefix, true);
}

char *tu_data_dir(void) {
  const char *src = getenv("BC_SRCDIR");
  if (src == NULL || src[0] == '\0')
    fail_msg("BC_SRCDIR is not set: run the tests through `make check`");
  return tu_format("%s/tests/data/bagz", src);
}

/* ---- SHA-256 (FIPS 180-4), used to check regenerated records -------------- */

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror32(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5],
           g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) +
                  ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) +
                  ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void tu_sha256_hex(const void *data, size_t size, char out[65]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const unsigned char *p = data;
  size_t left = size;
  for (; left >= 64; left -= 64, p += 64) sha_block(h, p);
  /* Padding: 0x80, zeros, then the bit length as a 64-bit big-endian. */
  unsigned char tail[128] = {0};
  if (left > 0) memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tail_len = left + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)size * 8;
  for (int i = 0; i < 8; i++)
    tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha_block(h, tail);
  if (tail_len == 128) sha_block(h, tail + 64);
  for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", h[i]);
}

/* ---- manifest and record rules ------------------------------------------ */

json_t *tu_manifest_load(void) {
  char *dir = tu_data_dir();
  char *path = tu_join(dir, "manifest.json");
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (root == NULL)
    fail_msg("%s:%d: %s", path, err.line, err.text);
  free(path);
  free(dir);
  return root;
}

unsigned char *tu_hex_decode(const char *hex, size_t *size) {
  size_t n = strlen(hex);
  if (n % 2 != 0) fail_msg("odd-length hex string %s", hex);
  unsigned char *out = malloc(n / 2 + 1);
  if (out == NULL) fail_msg("out of memory");
  for (size_t i = 0; i < n / 2; i++) {
    int v = 0;
    for (int j = 0; j < 2; j++) {
      char c = hex[2 * i + (size_t)j];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) fail_msg("bad hex digit '%c' in %s", c, hex);
      v = v * 16 + d;
    }
    out[i] = (unsigned char)v;
  }
  *size = n / 2;
  return out;
}

unsigned char *tu_rule_bytes(const char *rule, size_t *size) {
  unsigned char *out = NULL;
  if (strcmp(rule, "text100k") == 0) {
    /* Numbered lines, 53 bytes each, cut to 102400 bytes. */
    const size_t want = 102400;
    out = malloc(2000 * 64);
    if (out == NULL) fail_msg("out of memory");
    size_t n = 0;
    for (int i = 0; i < 2000; i++)
      n += (size_t)sprintf((char *)out + n,
                           "line %06d: the quick brown fox jumps over the lazy dog\n", i);
    if (n < want) fail_msg("text100k rule produced only %zu bytes", n);
    *size = want;
  } else if (strcmp(rule, "bytes200k") == 0) {
    out = malloc(256 * 800);
    if (out == NULL) fail_msg("out of memory");
    for (size_t i = 0; i < 256 * 800; i++) out[i] = (unsigned char)(i % 256);
    *size = 256 * 800;
  } else if (strcmp(rule, "noise300") == 0) {
    out = malloc(300);
    if (out == NULL) fail_msg("out of memory");
    uint64_t x = 42;
    for (size_t i = 0; i < 300; i++) {
      x = (x * 1103515245u + 12345u) & 0x7FFFFFFFu;
      out[i] = (unsigned char)((x >> 16) & 0xFF);
    }
    *size = 300;
  } else {
    fail_msg("unknown record rule %s", rule);
  }
  return out;
}

unsigned char *tu_manifest_record(const json_t *record, size_t *size) {
  unsigned char *data = NULL;
  size_t n = 0;
  const char *hex = json_string_value(json_object_get(record, "hex"));
  const char *text = json_string_value(json_object_get(record, "text"));
  const char *rule = json_string_value(json_object_get(record, "rule"));
  if (hex != NULL) {
    data = tu_hex_decode(hex, &n);
  } else if (text != NULL) {
    n = strlen(text);
    data = malloc(n + 1);
    if (data == NULL) fail_msg("out of memory");
    memcpy(data, text, n + 1);
  } else if (rule != NULL) {
    data = tu_rule_bytes(rule, &n);
  } else {
    fail_msg("manifest record without hex, text or rule");
  }
  json_int_t len = json_integer_value(json_object_get(record, "len"));
  if ((json_int_t)n != len)
    fail_msg("manifest record: regenerated %zu bytes, manifest says %lld", n,
             (long long)len);
  const char *sha = json_string_value(json_object_get(record, "sha256"));
  char got[65];
  tu_sha256_hex(data, n, got);
  if (sha == NULL || strcmp(sha, got) != 0)
    fail_msg("manifest record: sha256 %s, manifest says %s", got,
             sha ? sha : "(none)");
  *size = n;
  return data;
}

void tu_manifest_vector_records(const char *id, tu_records *out) {
  json_t *root = tu_manifest_load();
  size_t i;
  json_t *v;
  bool found = false;
  json_array_foreach(json_object_get(root, "vectors"), i, v) {
    const char *vid = json_string_value(json_object_get(v, "id"));
    if (vid == NULL || strcmp(vid, id) != 0) continue;
    size_t j;
    json_t *r;
    json_array_foreach(json_object_get(v, "records"), j, r) {
      size_t n;
      unsigned char *data = tu_manifest_record(r, &n);
      tu_records_add(out, data, n);
      free(data);
    }
    found = true;
    break;
  }
  json_decref(root);
  if (!found) fail_msg("no vector %s in the manifest", id);
}

/* ---- generator: splitmix64 ----------------------------------------------- */

void tu_rng_seed(tu_rng *r, uint64_t seed) { r->state = seed; }

uint64_t tu_rng_next(tu_rng *r) {
  uint64_t z = (r->state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

uint64_t tu_rng_below(tu_rng *r, uint64_t n) {
  /* Rejection sampling keeps the distribution exactly uniform. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do v = tu_rng_next(r);
  while (v >= limit);
  return v % n;
}

void tu_rng_fill(tu_rng *r, void *dst, size_t size) {
  unsigned char *p = dst;
  while (size > 0) {
    uint64_t v = tu_rng_next(r);
    size_t k = size < 8 ? size : 8;
    memcpy(p, &v, k);
    p += k;
    size -= k;
  }
}

/* ---- the record model ------------------------------------------------------ */

void tu_records_add(tu_records *recs, const void *data, size_t size) {
  size_t n = recs->count + 1;
  unsigned char **d = realloc(recs->data, n * sizeof *d);
  if (d == NULL) fail_msg("out of memory");
  recs->data = d;
  size_t *s = realloc(recs->size, n * sizeof *s);
  if (s == NULL) fail_msg("out of memory");
  recs->size = s;
  d[n - 1] = malloc(size + 1);
  if (d[n - 1] == NULL) fail_msg("out of memory");
  if (size > 0) memcpy(d[n - 1], data, size);
  s[n - 1] = size;
  recs->count = n;
}

void tu_records_free(tu_records *recs) {
  for (size_t i = 0; i < recs->count; i++) free(recs->data[i]);
  free(recs->data);
  free(recs->size);
  recs->data = NULL;
  recs->size = NULL;
  recs->count = 0;
}

void tu_records_labelled(tu_records *recs, const char *label, size_t count) {
  for (size_t i = 0; i < count; i++) {
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s-r%zu", label, i);
    tu_records_add(recs, buf, (size_t)n);
  }
}

void tu_write_bag(const char *path, const bc_writer_options *opts,
                  const tu_records *recs) {
  bc_writer *w = NULL;
  TU_OK(bc_writer_open(&w, path, opts));
  for (size_t i = 0; i < recs->count; i++)
    TU_OK(bc_writer_write(w, recs->data[i], recs->size[i]));
  assert_int_equal(bc_writer_count(w), recs->count);
  TU_OK(bc_writer_close(w));
  bc_writer_free(w);
}

void tu_check_bag_get(const bc_bag *bag, const tu_records *recs) {
  assert_int_equal(bc_bag_len(bag), recs->count);
  bc_buf buf = BC_BUF_INIT;
  for (size_t i = 0; i < recs->count; i++) {
    TU_OK(bc_bag_get(bag, i, &buf));
    char what[64];
    snprintf(what, sizeof what, "bc_bag_get(%zu)", i);
    tu_assert_bytes(buf.data, buf.size, recs->data[i], recs->size[i], what);
  }
  bc_buf_release(&buf);
}

void tu_check_bag(const bc_bag *bag, const tu_records *recs) {
  tu_check_bag_get(bag, recs);
  size_t n = recs->count;
  uint64_t *idx = calloc(n + 1, sizeof *idx);
  bc_buf *outs = calloc(n + 1, sizeof *outs);
  if (idx == NULL || outs == NULL) fail_msg("out of memory");
  for (size_t i = 0; i < n; i++) idx[i] = i;
  TU_OK(bc_bag_get_many(bag, idx, n, outs));
  for (size_t i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "bc_bag_get_many position %zu", i);
    tu_assert_bytes(outs[i].data, outs[i].size, recs->data[i], recs->size[i],
                    what);
    bc_buf_release(&outs[i]);
  }
  free(outs);
  free(idx);
}

/* ---- expected file images ------------------------------------------------ */

tu_image tu_image_build(const tu_records *recs, const int *level,
                        const void *dict, size_t dict_size) {
  tu_image im = {NULL, 0, NULL, 0};
  size_t cap = 64;
  for (size_t i = 0; i < recs->count; i++) cap += ZSTD_compressBound(recs->size[i]);
  im.records = malloc(cap);
  im.limits = malloc(8 * recs->count + 1);
  assert_true(im.records != NULL && im.limits != NULL);
  ZSTD_CCtx *cctx = NULL;
  ZSTD_CDict *cdict = NULL;
  if (level != NULL) {
    cctx = ZSTD_createCCtx();
    cdict = ZSTD_createCDict(dict, dict_size, *level);
    assert_true(cctx != NULL && cdict != NULL);
  }
  for (size_t i = 0; i < recs->count; i++) {
    if (recs->size[i] > 0) {
      if (level != NULL) {
        size_t n = ZSTD_compress_usingCDict(cctx, im.records + im.records_size,
                                            cap - im.records_size, recs->data[i],
                                            recs->size[i], cdict);
        assert_false(ZSTD_isError(n));
        im.records_size += n;
      } else {
        memcpy(im.records + im.records_size, recs->data[i], recs->size[i]);
        im.records_size += recs->size[i];
      }
    }
    for (int k = 0; k < 8; k++)
      im.limits[8 * i + (size_t)k] = (unsigned char)(im.records_size >> (8 * k));
  }
  im.limits_size = 8 * recs->count;
  ZSTD_freeCDict(cdict);
  ZSTD_freeCCtx(cctx);
  return im;
}

void tu_image_free(tu_image *im) {
  free(im->records);
  free(im->limits);
}

void tu_image_compare(const char *path, bc_limits_placement place,
                      const tu_image *im) {
  size_t n;
  unsigned char *got = tu_read_file(path, &n);
  if (place == BC_LIMITS_TAIL) {
    unsigned char *want = malloc(im->records_size + im->limits_size + 1);
    assert_non_null(want);
    memcpy(want, im->records, im->records_size);
    memcpy(want + im->records_size, im->limits, im->limits_size);
    tu_assert_bytes(got, n, want, im->records_size + im->limits_size, path);
    free(want);
  } else {
    tu_assert_bytes(got, n, im->records, im->records_size, path);
    char *lp = bc_limits_path(path);
    size_t ln;
    unsigned char *lim = tu_read_file(lp, &ln);
    tu_assert_bytes(lim, ln, im->limits, im->limits_size, lp);
    free(lim);
    free(lp);
  }
  free(got);
}


void tu_check_file(const char *spec, const bc_reader_options *ro,
                   const tu_records *want) {
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, spec, ro));
  tu_check_bag(bag, want);
  TU_OK(bc_bag_verify(bag, NULL));
  bc_bag_close(bag);
}

char *tu_data_path(const char *name) {
  char *dir = tu_data_dir();
  char *p = tu_join(dir, name);
  free(dir);
  return p;
}

/* ---- notices --------------------------------------------------------------- */

static atomic_uint notice_count;

static void count_notice(void *payload, const char *message) {
  (void)payload;
  (void)message;
  atomic_fetch_add(&notice_count, 1);
}

void tu_capture_notices(void) { bc_set_notice_handler(count_notice, NULL); }

unsigned tu_notice_count(void) { return atomic_load(&notice_count); }
