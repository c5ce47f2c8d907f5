/*
 * tests/cache/util.c - helpers for the cache engine's tests (see util.h).
 */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *cu_tmp_dir(void) {
  /* Every shard publish fsyncs files and directories; on a disk that costs
   * milliseconds each, so without an explicit TMPDIR the tests run in
   * /dev/shm when there is one (killing a process, which is what the crash
   * tests do, behaves the same on any file system). */
  const char *base = getenv("TMPDIR");
  if (base == NULL || *base == '\0')
    base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  size_t n = strlen(base) + 32;
  char *path = malloc(n);
  if (path == NULL) fail_msg("out of memory");
  snprintf(path, n, "%s/bc-cache-XXXXXX", base);
  if (mkdtemp(path) == NULL) fail_msg("mkdtemp %s: %s", path, strerror(errno));
  return path;
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP) rmdir(path);
  else unlink(path);
  return 0;
}

void cu_rm_rf(const char *path) {
  if (path != NULL) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *cu_path(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p == NULL) fail_msg("out of memory");
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* dir/name into out[size]; empty when it does not fit. */
static void join_into(char *out, size_t size, const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  if (a + b + 2 > size) {
    out[0] = '\0';
    return;
  }
  memcpy(out, dir, a);
  out[a] = '/';
  memcpy(out + a + 1, name, b + 1);
}

uint64_t cu_dir_bytes(const char *dir, size_t *files) {
  uint64_t total = 0;
  size_t count = 0;
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char path[4200];
      struct stat st;
      join_into(path, sizeof path, dir, e->d_name);
      if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
      total += (uint64_t)st.st_size;
      count++;
    }
    closedir(d);
  }
  if (files != NULL) *files = count;
  return total;
}

size_t cu_dir_count(const char *dir) {
  size_t count = 0;
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) count++;
  closedir(d);
  return count;
}

/* printf into why[256]; returns -1 (the failure result). */
static int say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say(char *why, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, 256, fmt, ap);
  va_end(ap);
  return -1;
}

/* Checks one shard file; 0 or -1 with why set. */
static int shard_file_valid(const char *dir, const char *name, bool fixed,
                            bool zstd, char *why) {
  unsigned long long start, end;
  int used = 0;
  const char *ext = zstd ? "bagz" : "bag";
  if (sscanf(name, "%llu.%llu.%n", &start, &end, &used) != 2 || used == 0 ||
      strcmp(name + used, ext) != 0 || end <= start) {
    say(why, "%s: not a shard file name", name);
    return -1;
  }
  char path[4200];
  join_into(path, sizeof path, dir, name);
  bc_bag *bag = NULL;
  bc_buf buf = BC_BUF_INIT;
  int result = -1;
  int rc = bc_bag_open(&bag, path, NULL);
  if (rc != 0) {
    say(why, "%s: does not open: %s", name, bc_errmsg());
    goto cleanup;
  }
  if (bc_bag_len(bag) != end - start) {
    say(why, "%s: %llu records", name,
             (unsigned long long)bc_bag_len(bag));
    goto cleanup;
  }
  uint64_t bad = 0;
  if ((rc = bc_bag_verify(bag, &bad)) != 0) {
    say(why, "%s: record %llu invalid: %s", name,
             (unsigned long long)bad, bc_errmsg());
    goto cleanup;
  }
  for (uint64_t k = 0; k < end - start; k++) {
    if (bc_bag_get(bag, k, &buf) != 0 || !ts_matches(start + k, fixed, &buf)) {
      say(why, "%s: record %llu differs from the model", name,
               (unsigned long long)(start + k));
      goto cleanup;
    }
  }
  result = 0;
cleanup:
  bc_buf_release(&buf);
  bc_bag_close(bag);
  return result;
}

int cu_shards_valid(const char *root, bool fixed, bool zstd, size_t *count,
                    char *why) {
  char dir[4200];
  join_into(dir, sizeof dir, root, "shards");
  size_t n = 0;
  int result = 0;
  DIR *d = opendir(dir);
  if (d == NULL && errno == ENOENT) { /* not created yet: nothing visible */
    if (count != NULL) *count = 0;
    return 0;
  }
  if (d == NULL) return say(why, "%s: %s", dir, strerror(errno));
  struct dirent *e;
  while (result == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    n++;
    result = shard_file_valid(dir, e->d_name, fixed, zstd, why);
  }
  closedir(d);
  if (count != NULL) *count = n;
  return result;
}

void cu_check_shards(const char *root, bool fixed, bool zstd) {
  char why[256];
  if (cu_shards_valid(root, fixed, zstd, NULL, why) != 0)
    fail_msg("shards/ of %s: %s", root, why);
}

/* Counts lines of /proc/self/maps, and links in /proc/self/fd, that name a
 * file under dir/ (only those ending in " (deleted)" if deleted_only). */
static size_t mapped_in(const char *dir, bool deleted_only) {
  size_t n = 0, dlen = strlen(dir);
  char line[8192];
  FILE *maps = fopen("/proc/self/maps", "r");
  if (maps != NULL) {
    while (fgets(line, sizeof line, maps) != NULL) {
      char *path = strchr(line, '/');
      if (path != NULL && strncmp(path, dir, dlen) == 0 && path[dlen] == '/' &&
          (!deleted_only || strstr(path, " (deleted)") != NULL))
        n++;
    }
    fclose(maps);
  }
  DIR *d = opendir("/proc/self/fd");
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char link[300];
      join_into(link, sizeof link, "/proc/self/fd", e->d_name);
      ssize_t len = readlink(link, line, sizeof line - 1);
      if (len <= 0) continue;
      line[len] = '\0';
      if (strncmp(line, dir, dlen) == 0 && line[dlen] == '/' &&
          (!deleted_only || strstr(line, " (deleted)") != NULL))
        n++;
    }
    closedir(d);
  }
  return n;
}

size_t cu_deleted_held(const char *dir) { return mapped_in(dir, true); }

size_t cu_mapped(const char *dir) { return mapped_in(dir, false); }

int cu_get_cmp(bc_cache *c, int64_t i, bool fixed, bc_buf *buf) {
  int rc = bc_cache_get(c, i, buf);
  if (rc != 0) return rc;
  return ts_matches((uint64_t)i, fixed, buf) ? 0 : 1;
}

void cu_check_all(bc_cache *c, uint64_t n, bool fixed) {
  bc_buf buf = BC_BUF_INIT;
  for (uint64_t i = 0; i < n; i++) {
    int rc = cu_get_cmp(c, (int64_t)i, fixed, &buf);
    if (rc != 0) {
      bc_buf_release(&buf);
      fail_msg("record %llu: %s (%s)", (unsigned long long)i,
               rc == 1 ? "differs from the model" : bc_error_name(rc),
               rc == 1 ? "" : bc_errmsg());
    }
  }
  bc_buf_release(&buf);
}

int cu_open(bc_cache **out, const char *root, const ts_config *cfg,
            ts_shared *shared, const bc_cache_options *opts) {
  if (cfg == NULL) return bc_cache_open(out, root, NULL, opts);
  bc_source src = ts_source(cfg, shared);
  if (src.payload == NULL) return BC_ENOMEM;
  return bc_cache_open(out, root, &src, opts);
}

/* ---- notices ----------------------------------------------------------- */

static pthread_mutex_t notice_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned notice_count;
static char notice_text[64][512]; /* the most recent notices, a ring */

static void on_notice(void *payload, const char *message) {
  (void)payload;
  pthread_mutex_lock(&notice_lock);
  snprintf(notice_text[notice_count % 64], sizeof notice_text[0], "%s", message);
  notice_count++;
  pthread_mutex_unlock(&notice_lock);
}

void cu_notices_capture(void) { bc_set_notice_handler(on_notice, NULL); }

unsigned cu_notice_count(void) {
  pthread_mutex_lock(&notice_lock);
  unsigned n = notice_count;
  pthread_mutex_unlock(&notice_lock);
  return n;
}

bool cu_notice_seen(const char *needle) {
  bool seen = false;
  pthread_mutex_lock(&notice_lock);
  unsigned kept = notice_count < 64 ? notice_count : 64;
  for (unsigned k = 0; k < kept && !seen; k++)
    seen = strstr(notice_text[k], needle) != NULL;
  pthread_mutex_unlock(&notice_lock);
  return seen;
}

void cu_notices_reset(void) {
  pthread_mutex_lock(&notice_lock);
  notice_count = 0;
  memset(notice_text, 0, sizeof notice_text);
  pthread_mutex_unlock(&notice_lock);
}

/* ---- misc ------------------------------------------------------------- */

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "cache test: watchdog expired (a deadlock?)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(99);
  _exit(99);
}

void cu_watchdog(unsigned seconds) {
  signal(SIGALRM, on_alarm);
  alarm(seconds);
}

uint64_t cu_rand(uint64_t *state) {
  uint64_t x = *state += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void cu_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f == NULL) fail_msg("%s: %s", path, strerror(errno));
  fputs(text, f);
  if (fclose(f) != 0) fail_msg("%s: %s", path, strerror(errno));
}

uint64_t *cu_shard_sizes(uint64_t n, uint64_t records, bool fixed) {
  char *dir = cu_tmp_dir();
  char *root = cu_path(dir, "c");
  ts_config cfg = ts_config_default(n);
  cfg.fixed = fixed;
  ts_shared *sh = ts_shared_new(&cfg);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = records;
  o.prefetch_shards = -1;
  bc_cache *c = NULL;
  CU_OK(cu_open(&c, root, &cfg, sh, &o));
  CU_OK(bc_cache_fill_all(c));
  size_t count = (size_t)((n + records - 1) / records), got = 0;
  bc_cache_shard *list = calloc(count ? count : 1, sizeof *list);
  uint64_t *sizes = calloc(count ? count : 1, sizeof *sizes);
  if (list == NULL || sizes == NULL) fail_msg("out of memory");
  CU_OK(bc_cache_shards(c, list, count, &got));
  if (got != count) fail_msg("%zu shards, expected %zu", got, count);
  for (size_t k = 0; k < count; k++) sizes[k] = list[k].bytes;
  free(list);
  bc_cache_close(c);
  ts_shared_free(sh);
  cu_rm_rf(dir);
  free(root);
  free(dir);
  return sizes;
}
