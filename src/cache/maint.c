/*
 * Maintenance: rebuilding the shared state from shards/, cleaning scratch/
 * after dead writers, estimating the shard length, verify, export, clear.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bag/internal.h"
#include "cache/internal.h"

/* Parses "START.END.bag" / "START.END.bagz". */
static bool parse_shard_name(const char *name, uint64_t *start, uint64_t *end,
                             bool *zstd) {
  unsigned long long a, b;
  int n = 0;
  if (sscanf(name, "%llu.%llu.%n", &a, &b, &n) != 2 || n == 0) return false;
  if (strcmp(name + n, "bag") == 0) *zstd = false;
  else if (strcmp(name + n, "bagz") == 0) *zstd = true;
  else return false;
  if (b <= a || b > (unsigned long long)INT64_MAX) return false;
  *start = a;
  *end = b;
  return true;
}

/* Parses a sidecar's name "START.END.bag.crc". */
static bool parse_crc_name(const char *name, uint64_t *start, uint64_t *end) {
  size_t n = strlen(name);
  char shard[256];
  bool zstd;
  if (n < 5 || n - 4 >= sizeof shard || strcmp(name + n - 4, ".crc") != 0)
    return false;
  memcpy(shard, name, n - 4);
  shard[n - 4] = '\0';
  return parse_shard_name(shard, start, end, &zstd) && !zstd;
}

/* Removes every file of shard `shard` from dir (shard files, or sidecars). */
static void unlink_in(bc_cache *c, const char *dir, uint64_t shard, bool sums) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t start, end;
    bool zstd;
    if ((sums ? parse_crc_name(e->d_name, &start, &end)
              : parse_shard_name(e->d_name, &start, &end, &zstd)) &&
        start == shard * c->R) {
      unlinkat(dirfd(d), e->d_name, 0);
    }
  }
  closedir(d);
}

void bc__unlink_shard_files(bc_cache *c, uint64_t shard) {
  unlink_in(c, c->shards_dir, shard, false);
  if (c->crc) unlink_in(c, c->sums_dir, shard, true); /* after: never a
                                                          shard without */
}

/* True when shard file NAME has its sidecar in sums/. */
static bool has_sidecar(const bc_cache *c, const char *name) {
  char *path = bc__path_printf("%s/%s.crc", c->sums_dir, name);
  bool there = path != NULL && access(path, F_OK) == 0;
  free(path);
  return there;
}

/* Infers the shard length, compression and known length from the files
 * in shards/ (metadata.json is gone but shards remain).  Every shard but
 * the last one of a source is full, so the length of any file that is not
 * the highest is R.  A lone file is taken as full (R = its length) when
 * its start allows, else R = its start: never shorter than a shard that
 * may be full, so no record it holds is taken for the end of the source.
 * Files of the other compression than the majority, or that do not fit R,
 * are left to the rebuild (which leaves them alone with a notice). */
int bc__infer_layout(bc_cache *c, bc__layout *out) {
  memset(out, 0, sizeof *out);
  DIR *d = opendir(c->shards_dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : bc__error_errno(errno, "%s", c->shards_dir);
  uint64_t top_start = 0, top_len = 0, full = 0;
  size_t nzstd = 0;
  bool all_crc = true;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t start, end;
    bool zstd;
    if (!parse_shard_name(e->d_name, &start, &end, &zstd)) continue;
    out->files++;
    nzstd += zstd;
    if (!zstd && all_crc) all_crc = has_sidecar(c, e->d_name);
    if (end > out->length) out->length = end;
    if (out->files == 1 || start > top_start) {
      if (out->files > 1 && top_len > full) full = top_len; /* not the top */
      top_start = start;
      top_len = end - start;
    } else if (end - start > full) {
      full = end - start;
    }
  }
  closedir(d);
  out->crc = all_crc; /* version 2 wrote one for every .bag shard */
  if (out->files == 0) return 0;
  out->zstd = 2 * nzstd > out->files;
  uint64_t r = full > top_len ? full : top_len;
  if (top_start % r != 0)
    r = top_start; /* a lone short file (or names that do not agree): its
                      start is a shard length that holds it */
  out->shard_records = r;
  return 0;
}

/* A file of shards/ named like a shard, as the rebuild sees it. */
typedef struct {
  char *name;
  uint64_t start, end, bytes;
  bool zstd;
  const char *why; /* NULL: adopted */
} found_file;

/* Moves a file that does not fit this cache out of shards/, into
 * ROOT/rejected/, so that it is never taken for a shard. */
static void reject_file(bc_cache *c, const found_file *f) {
  char *from = bc__path_printf("%s/%s", c->shards_dir, f->name);
  char *dir = bc__path_printf("%s/rejected", c->root);
  char *to = dir ? bc__path_printf("%s/%s", dir, f->name) : NULL;
  if (from == NULL || to == NULL)
    bc__notice("%s/%s: not a shard of this cache (%s); left alone: out of "
               "memory", c->shards_dir, f->name, f->why);
  else if ((mkdir(dir, 0755) == 0 || errno == EEXIST) && rename(from, to) == 0)
    bc__notice("%s: not a shard of this cache (%s); moved to %s", from, f->why, to);
  else
    bc__notice("%s: not a shard of this cache (%s); left alone: cannot move "
               "it to %s: %s", from, f->why, dir, strerror(errno));
  free(to);
  free(dir);
  free(from);
}

/* Decides which files of shards/ are shards of this cache: named on a
 * shard boundary with this cache's compression, a readable Bagz file
 * holding exactly the records its name says, R of them, or fewer for the
 * one last shard only (no other file starts after it, it ends at or past
 * the known length, and where the length is final it ends there; a full
 * shard never ends past a final length).  Sets f->why for the others. */
static void judge_files(bc_cache *c, found_file *files, size_t n,
                        uint64_t length, bool final) {
  uint64_t R = c->R, top = 0;
  for (size_t i = 0; i < n; i++) {
    found_file *f = &files[i];
    bc_bag *bag = NULL;
    if (R == 0) f->why = "the cache's shard length is not decided";
    else if (f->start % R != 0) f->why = "not on a shard boundary";
    else if (f->end - f->start > R) f->why = "more records than a shard holds";
    else if (f->zstd != c->zstd) f->why = "the other compression";
    else if (final && f->end > length) f->why = "past the end of the source";
    else if (bc__bag_open_file(&bag, f->name, NULL) != 0) f->why = "not a readable Bagz file";
    else if (bc_bag_len(bag) != f->end - f->start) f->why = "its record count differs from its name";
    bc_bag_close(bag);
    if (f->why == NULL && f->start + 1 > top) top = f->start + 1;
  }
  /* The last shard: the highest start among the files kept so far. */
  for (size_t i = 0; i < n; i++) {
    found_file *f = &files[i];
    if (f->why != NULL || f->end - f->start == R) continue;
    if (f->start + 1 != top) f->why = "a short shard that is not the last one";
    else if (f->end < length || (final && f->end != length))
      f->why = "a short shard that ends before the known length";
  }
  /* A short last shard and a full one of the same start: the full one
   * cannot be (the source ended inside it); the short one was judged
   * against the other files' starts only, so both go. */
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n && files[i].why == NULL; j++)
      if (j != i && files[j].why == NULL && files[j].start == files[i].start &&
          files[j].end != files[i].end)
        files[i].why = files[j].why = "two files of one shard";
}

/* Builds the state from a scan of shards/ when it is new (first open, or
 * lost, or discarded as corrupt).  "ready" marks it built.  Only files that
 * fit the layout are adopted (judge_files); the others are moved aside. */
int bc__rebuild_state(bc_cache *c) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t);
  if (rc != 0) return rc;
  MDB_dbi meta = bc__dbi_meta(c->env), sdb = bc__dbi_shard(c->env);
  uint64_t ready = 0, length = 0, fin = 0;
  bool found = false, f2 = false, f3 = false;
  rc = bc__u64_get(t, meta, "ready", &ready, &found);
  if (rc != 0 || found) {
    if (rc == 0) rc = bc__cache_load_length(c, t);
    mdb_txn_abort(t);
    return rc;
  }
  rc = bc__u64_get(t, meta, "length", &length, &f2);
  if (rc == 0) rc = bc__u64_get(t, meta, "final", &fin, &f3);
  if (atomic_load(&c->known_length) > length) length = atomic_load(&c->known_length);
  bool final = atomic_load(&c->final) || (f3 && fin);
  uint64_t bytes = 0, adopted = 0;
  found_file *files = NULL;
  size_t n = 0, cap = 0;
  DIR *d = opendir(c->shards_dir);
  if (rc == 0 && d == NULL) rc = bc__error_errno(errno, "%s", c->shards_dir);
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    found_file f = {0};
    if (!parse_shard_name(e->d_name, &f.start, &f.end, &f.zstd)) continue;
    char *path = bc__path_printf("%s/%s", c->shards_dir, e->d_name);
    struct stat st;
    if (path == NULL) {
      rc = bc__error(BC_ENOMEM, "out of memory");
      break;
    }
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
      free(path);
      continue;
    }
    f.bytes = (uint64_t)st.st_size;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      found_file *p = realloc(files, cap * sizeof *p);
      if (p == NULL) {
        free(path);
        rc = bc__error(BC_ENOMEM, "out of memory");
        break;
      }
      files = p;
    }
    f.name = path; /* files[] owns it now */
    files[n++] = f;
  }
  if (d) closedir(d);
  if (rc == 0) judge_files(c, files, n, length, final);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    found_file *f = &files[i];
    /* Names are kept whole for the notices, the file part for moving. */
    char *slash = strrchr(f->name, '/');
    if (f->why != NULL) {
      found_file g = *f;
      g.name = slash + 1;
      reject_file(c, &g);
      continue;
    }
    bc__shard_rec rec = {.state = SHARD_PRESENT, .zstd = f->zstd,
                         .records = f->end - f->start, .bytes = f->bytes};
    rc = bc__rec_put(t, sdb, f->start / c->R, &rec);
    bytes += f->bytes;
    if (f->end > length) length = f->end;
    adopted++;
  }
  for (size_t i = 0; i < n; i++) free(files[i].name);
  free(files);
  if (rc == 0) rc = bc__u64_put(t, meta, "bytes", bytes);
  if (rc == 0) rc = bc__u64_put(t, meta, "length", length);
  if (rc == 0 && atomic_load(&c->final)) rc = bc__u64_put(t, meta, "final", 1);
  if (rc == 0) rc = bc__u64_put(t, meta, "ready", 1);
  if (rc == 0) rc = bc__txn_commit(t);
  else mdb_txn_abort(t);
  if (rc == 0 && length > atomic_load(&c->known_length))
    atomic_store(&c->known_length, length);
  if (rc == 0 && adopted > 0)
    bc__notice("%s: rebuilt the shared state from %llu shard files", c->root,
               (unsigned long long)adopted);
  return rc;
}

/* Scratch files are "SHARD-PID-START.bag[z]" (and the writer's hidden
 * ".SHARD-PID-START.bag[z].tmp-XXXXXX"): remove those of dead processes. */
void bc__clean_scratch(bc_cache *c) {
  DIR *d = opendir(c->scratch_dir);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name[0] == '.' ? e->d_name + 1 : e->d_name;
    unsigned long long shard, start;
    int pid;
    if (sscanf(name, "%llu-%d-%llu.", &shard, &pid, &start) != 3) continue;
    bc__owner o = {pid, start};
    if (bc__owner_alive(o)) continue;
    unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

int bc__estimate_shard_records(bc_cache *c, uint64_t *records) {
  /* What the first records of a pass cost on disk, averaged: stored bytes
   * (compressed as the shards will be) plus the 8-byte limit each record
   * adds.  shard_records = shard_bytes / that. */
  void *pass = NULL;
  int rc = c->src.open(c->src.payload, &pass);
  if (rc != 0) return rc < 0 ? rc : bc__error(BC_ESOURCE, "the source's open failed");
  atomic_fetch_add(&c->stats.passes_opened, 1);
  bool zstd = c->opts.compression == BC_COMPRESSION_ZSTD;
  bc__encoder *enc = NULL;
  if (zstd) rc = bc__encoder_new(&enc, c->opts.zstd_level, NULL, 0);
  bc_buf buf = BC_BUF_INIT, packed = BC_BUF_INIT;
  uint64_t n = 0, total = 0;
  while (rc == 0 && n < 16) {
    int r = c->src.next(c->src.payload, pass, &buf);
    if (r < 0) {
      rc = r;
      break;
    }
    if (r == 0) break;
    uint64_t stored = buf.size;
    if (zstd && buf.size > 0 &&
        (rc = bc__encoder_encode(enc, buf.data, buf.size, &packed)) == 0)
      stored = packed.size;
    total += stored + 8;
    n++;
  }
  c->src.close(c->src.payload, pass);
  bc__encoder_free(enc);
  bc_buf_release(&buf);
  bc_buf_release(&packed);
  if (rc != 0) return rc;
  uint64_t target = c->opts.shard_bytes ? c->opts.shard_bytes : (uint64_t)64 << 20;
  uint64_t cost = n ? total / n : 8;
  if (cost == 0) cost = 8;
  *records = target / cost ? target / cost : 1;
  return 0;
}

/* ---- verify ------------------------------------------------------------------- */

int bc_cache_verify(bc_cache *c, uint64_t *bad_start) {
  size_t count = 0;
  int rc = bc_cache_shards(c, NULL, 0, &count);
  if (rc != 0) return rc;
  bc_cache_shard *list = malloc((count ? count : 1) * sizeof *list);
  if (list == NULL) return bc__error(BC_ENOMEM, "out of memory");
  rc = bc_cache_shards(c, list, count, &count);
  bc_buf buf = BC_BUF_INIT;
  for (size_t i = 0; rc == 0 && i < count; i++) {
    bc_cache_shard *s = &list[i];
    char *path = NULL;
    uint64_t shard = s->start / c->R, sum = BC__SUM_INIT, want = 0;
    struct stat st;
    bc_bag *bag = NULL;
    rc = bc_cache_shard_path(c, s, &path);
    if (rc == 0 && stat(path, &st) != 0) {
      rc = bc__error_errno(errno, "%s: shard missing", path);
    } else if (rc == 0 && (uint64_t)st.st_size != s->bytes) {
      rc = bc__error(BC_ECORRUPT, "%s: %llu bytes, %llu recorded", path,
                     (unsigned long long)st.st_size, (unsigned long long)s->bytes);
    } else if (rc == 0 && (rc = bc__cache_open_shard(c, path, &bag)) == 0) {
      if (bc_bag_len(bag) != s->end - s->start)
        rc = bc__error(BC_ECORRUPT, "%s: %llu records, %llu recorded", path,
                       (unsigned long long)bc_bag_len(bag),
                       (unsigned long long)(s->end - s->start));
      for (uint64_t k = 0; rc == 0 && k < bc_bag_len(bag); k++) {
        rc = bc_bag_get(bag, k, &buf);
        if (rc == 0) sum = bc__sum_add(sum, buf.data, buf.size);
      }
      bc_bag_close(bag);
      MDB_txn *t;
      bool found = false;
      if (rc == 0 && (rc = bc__txn_begin(c->env, false, &t)) == 0) {
        rc = bc__sum_get(t, bc__dbi_sum(c->env), shard, &want, &found);
        mdb_txn_abort(t);
      }
      if (rc == 0 && found && want != sum)
        rc = bc__error(BC_ECORRUPT, "%s: contents differ from the checksum "
                       "recorded when it was first published", path);
    }
    free(path);
    if (rc != 0 && bad_start) *bad_start = s->start;
  }
  bc_buf_release(&buf);
  free(list);
  return rc;
}

/* ---- export ------------------------------------------------------------------- */

int bc_cache_export(bc_cache *c, const char *out_spec) {
  uint64_t len;
  int rc = bc_cache_len(c, &len);
  if (rc != 0) return rc;
  bc__shard_path *paths = NULL;
  size_t n = 0;
  if ((rc = bc__spec_expand(out_spec, false, &paths, &n)) != 0) return rc;
  if (n == 0) {
    bc__spec_free(paths, n);
    return bc__error(BC_EINVAL, "export: no output file in \"%s\"", out_spec);
  }
  bc_buf buf = BC_BUF_INIT;
  uint64_t next = 0;
  for (size_t k = 0; rc == 0 && k < n; k++) {
    /* Shard k holds records [k*len/n, (k+1)*len/n): as even as possible. */
    uint64_t end = (uint64_t)(((unsigned __int128)len * (k + 1)) / n);
    bc_writer *w = NULL;
    rc = bc_writer_open(&w, paths[k].records, NULL);
    for (; rc == 0 && next < end; next++) {
      rc = bc_seq_get(&c->base, (int64_t)next, &buf);
      if (rc == 0) rc = bc_writer_write(w, buf.data, buf.size);
    }
    if (rc == 0) rc = bc_writer_close(w);
    bc_writer_free(w);
  }
  bc_buf_release(&buf);
  bc__spec_free(paths, n);
  return rc;
}

/* ---- clear ---------------------------------------------------------------------- */

/* Removes the files of `dir` and then `dir`.  Files that appear meanwhile
 * (rmdir: ENOTEMPTY) are removed in another round, a few times at most.
 * A directory inside (locks/lease-BOOT, lease.h) goes the same way, at
 * most `depth` levels down. */
static int remove_dir_files_at(const char *dir, int depth) {
  int rc = 0;
  for (int round = 0; round < 8; round++) {
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? 0 : bc__error_errno(errno, "%s", dir);
    struct dirent *e;
    rc = 0;
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (unlinkat(dirfd(d), e->d_name, 0) == 0 || errno == ENOENT) continue;
      if ((errno == EISDIR || errno == EPERM) && depth > 0) {
        char *sub = bc__path_printf("%s/%s", dir, e->d_name);
        int src = sub ? remove_dir_files_at(sub, depth - 1)
                      : bc__error(BC_ENOMEM, "out of memory");
        free(sub);
        if (src != 0 && rc == 0) rc = src;
      } else if (rc == 0) {
        rc = bc__error_errno(errno, "%s/%s", dir, e->d_name);
      }
    }
    closedir(d);
    if (rc != 0) return rc;
    if (rmdir(dir) == 0 || errno == ENOENT) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) break;
  }
  return bc__error_errno(errno, "%s", dir);
}

static int remove_dir_files(const char *dir) { return remove_dir_files_at(dir, 1); }

/* Takes the exclusive flock of `fd`, polling (and the interrupt hook) while
 * another process holds it: 0, or the error. */
static int flock_polled(int fd, const char *path) {
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK && errno != EINTR) return bc__error_errno(errno, "%s", path);
    int rc = bc__interrupt_poll();
    if (rc != 0) return rc;
    struct timespec ts = {0, BC__POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Deletes the whole root if no process has its state open: *alone then.
 * Holds locks/gate (which every open takes before locks/users, state.c) and
 * locks/users exclusively while deleting, so no process opens the state
 * meanwhile; one waiting for the gate finds it unlinked and starts its open
 * again (bc__env_acquire), on a root that no longer exists. */
static int clear_alone(const char *root, const char *meta, bool *alone) {
  char *gate_path = bc__path_printf("%s/locks/gate", root);
  char *users_path = bc__path_printf("%s/locks/users", root);
  char *path = NULL;
  int gate = -1, users = -1, rc = 0;
  *alone = false;
  if (gate_path == NULL || users_path == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  struct stat st;
  if (stat(gate_path, &st) == 0 || errno != ENOENT) {
    /* A state that was opened: is anybody using it? */
    gate = open(gate_path, O_RDWR | O_CLOEXEC);
    if (gate < 0 && errno != ENOENT) {
      rc = bc__error_errno(errno, "%s", gate_path);
      goto cleanup;
    }
    if (gate >= 0 && (rc = flock_polled(gate, gate_path)) != 0) goto cleanup;
    users = open(users_path, O_RDWR | O_CLOEXEC);
    if (users < 0 && errno != ENOENT) {
      rc = bc__error_errno(errno, "%s", users_path);
      goto cleanup;
    }
    if (users >= 0 && flock(users, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) rc = bc__error_errno(errno, "%s", users_path);
      goto cleanup; /* in use */
    }
  }
  *alone = true;
  static const char *const dirs[] = {"shards", "sums", "scratch", "locks"};
  for (size_t i = 0; rc == 0 && i < 4; i++) {
    free(path);
    path = bc__path_printf("%s/%s", root, dirs[i]);
    rc = path ? remove_dir_files(path) : bc__error(BC_ENOMEM, "out of memory");
  }
  if (rc == 0 && unlink(meta) != 0 && errno != ENOENT)
    rc = bc__error_errno(errno, "%s", meta);
  if (rc == 0) rmdir(root); /* only if empty: other files are the user's */
cleanup:
  if (users >= 0) close(users); /* drops its flock */
  if (gate >= 0) close(gate);
  free(path);
  free(users_path);
  free(gate_path);
  return rc;
}

/* Removes the files in `dir` named like shards (sidecars with `sums`)
 * whose shard has no claim of a live filler, under the state's write lock
 * (a publish of a live claim may have renamed its file in before its
 * commit: that one stays). */
static int remove_strays(bc_cache *c, bc__store_txn *t, const char *dir, bool sums) {
  DIR *d = opendir(dir);
  if (d == NULL) return errno == ENOENT ? 0 : bc__error_errno(errno, "%s", dir);
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    uint64_t start, end;
    bool zstd, found = false;
    if (!(sums ? parse_crc_name(e->d_name, &start, &end)
               : parse_shard_name(e->d_name, &start, &end, &zstd)) ||
        start % c->R != 0)
      continue;
    bc__shard_rec rec;
    rc = c->store.ops->get(t, start / c->R, &rec, &found); /* (claims: leases) */
    if (rc == 0 && found && rec.state == SHARD_FILLING && bc__owner_alive(rec.owner))
      continue;
    if (rc == 0 && found && rec.state == SHARD_PRESENT) continue; /* published
                                                                      since */
    if (rc == 0) unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
  return rc;
}

int bc__remove_strays(bc_cache *c) {
  bc__store_txn *t = NULL;
  int rc = c->store.ops->begin(c->store.impl, true, &t);
  if (rc != 0) return rc;
  rc = remove_strays(c, t, c->shards_dir, false);
  if (rc == 0 && c->crc) rc = remove_strays(c, t, c->sums_dir, true);
  c->store.ops->abort(t); /* (held as the lock only: nothing was written) */
  return rc;
}

/* Empties a root other processes use (bc__store_clear): opened like any
 * reader without a source, so the state stays consistent for them. */
static int clear_in_use(const char *root, uint64_t *removed) {
  bc_cache *c = NULL;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  int rc = bc_cache_open(&c, root, NULL, &o);
  if (rc == 0) rc = bc__store_clear(&c->store, removed);
  if (rc == 0) rc = bc__remove_strays(c);
  bc_cache_close(c);
  return rc;
}

int bc_cache_clear(const char *root) {
  struct stat st;
  if (stat(root, &st) != 0) return bc__error_errno(errno, "%s", root);
  char *meta = bc__path_printf("%s/metadata.json", root);
  int rc = meta ? 0 : bc__error(BC_ENOMEM, "out of memory");
  if (rc == 0 && access(meta, F_OK) != 0)
    rc = bc__error(BC_EINVAL, "%s: not a bagcache cache (no metadata.json); "
                   "refusing to delete anything", root);
  bool alone = false;
  if (rc == 0) rc = clear_alone(root, meta, &alone);
  /* In use: emptied under the state's write lock; then, should the others
   * have closed it meanwhile, deleted after all. */
  uint64_t removed = 0;
  if (rc == 0 && !alone) rc = clear_in_use(root, &removed);
  if (rc == 0 && !alone) rc = clear_alone(root, meta, &alone);
  if (rc == 0 && !alone)
    bc__notice("%s: in use by other processes: emptied (%llu shards removed); "
               "its metadata.json, shared state and directories stay for them",
               root, (unsigned long long)removed);
  free(meta);
  return rc;
}
