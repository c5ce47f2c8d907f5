/*
 * Validation of an LMDB data file (locks/data.mdb) before LMDB opens it.
 *
 * LMDB trusts its pages: a page number, a node offset, a free-list length
 * read from a damaged file is followed as it is, and the process dies
 * (SIGSEGV, SIGBUS), aborts on one of LMDB's assertions, or loops.  So
 * before the first process opens the environment (state.c: only when no
 * other process has it open, under the exclusive lock on locks/users), this
 * file walks everything LMDB will read, with our own bounds checks, on
 * copies of the pages read with pread (no mapping, so no fault):
 *
 *  - both meta pages: the meta flag, magic and version LMDB checks, one
 *    page size, and for the meta LMDB will use (the newer; its slot must
 *    match its transaction id's parity, as LMDB picks it by that parity):
 *    the last page below the map size, the free and main trees' flags;
 *  - every tree (the free list's, the main one, and each named database's
 *    that the main one lists): every page inside the file and at most the
 *    last page, reached once (no cycles, no sharing), of the kind its level
 *    wants (branch above, leaf at the tree's depth), with the page's own
 *    number, sane free-space bounds, every node inside the page, keys in
 *    strictly ascending order within the bounds its parent gives (so LMDB's
 *    binary searches and splits stay in order), overflow pages in range and
 *    of the right kind, and the tree's recorded depth and counts of
 *    entries, branch, leaf and overflow pages exact;
 *  - the free list's records: page lists of the length they claim, sorted
 *    as LMDB keeps them, of pages that exist, are in no tree and are listed
 *    once, under transaction ids not past the meta's.
 *
 * It also tells whether the engine's "shard" database holds an entry that
 * is not a well-formed PRESENT record, so that state.c walks it for claims
 * no process can hold only then.
 *
 * Duplicate-key databases (MDB_DUPSORT) are reported as damage: bagcache
 * never creates one.  Cost: one pread per page of the state plus one per
 * overflow record; the state of a cache is a few pages per thousand shards.
 * The layout is LMDB 0.9's (data version 1), which every liblmdb0 shares.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

/* ---- LMDB 0.9's on-disk layout (mdb.c), native byte order ---------------- */

enum {
  PAGEHDRSZ = 16, /* pgno (8), pad (2), flags (2), lower/upper or pages (4) */
  NODESIZE = 8,   /* lo, hi, flags, ksize: 2 bytes each */
  META_OFF = PAGEHDRSZ,
  DB_SIZE = 48, /* MDB_db: pad 4, flags 2, depth 2, branch, leaf, overflow,
                   entries, root: 8 each */
  META_SIZE = 8 + 8 + 8 + 2 * DB_SIZE + 8 + 8,
  P_BRANCH = 0x01, P_LEAF = 0x02, P_OVERFLOW = 0x04, P_META = 0x08,
  F_BIGDATA = 0x01, F_SUBDATA = 0x02, F_DUPDATA = 0x04,
  K_REVERSEKEY = 0x02, K_DUPSORT = 0x04, K_INTEGERKEY = 0x08,
  MAX_DEPTH = 24 /* LMDB's cursor stack holds 32 */
};
#define MDB_MAGIC_V 0xBEEFC0DEu
#define P_INVALID_V (~(uint64_t)0)

static uint16_t ld16(const unsigned char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static uint32_t ld32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t ld64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

typedef struct {
  uint32_t pad;
  uint16_t flags, depth;
  uint64_t branch, leaf, overflow, entries, root;
} db_rec;

static db_rec db_decode(const unsigned char *p) {
  db_rec d = {ld32(p), ld16(p + 4), ld16(p + 6), ld64(p + 8), ld64(p + 16),
              ld64(p + 24), ld64(p + 32), ld64(p + 40)};
  return d;
}

/* ---- the walk ------------------------------------------------------------------ */

typedef struct {
  int fd;
  const char *path;
  uint32_t psize;
  uint64_t file_pages; /* whole pages in the file */
  uint64_t last_pg;    /* the meta's last page */
  uint64_t txnid;
  unsigned char *seen; /* bitmap of pages reached, last_pg + 1 bits */
  unsigned char *pages; /* MAX_DEPTH page buffers, one per level */
  /* The free list's records (page lists), kept to check after the walk. */
  uint64_t *free_ids;
  size_t nfree, free_cap;
  bool suspect;  /* the "shard" database holds an entry that is not a
                    well-formed PRESENT record (a claim, or damage) */
  db_rec sub[8]; /* named databases found in the main tree */
  unsigned char sub_name[8][64];
  size_t sub_len[8], nsub;
} walker;

typedef struct {
  const unsigned char *p;
  size_t n;
} key;

/* BC_ECORRUPT with "PATH: " and `fmt`, which takes two unsigned long long
 * values (%.0llu consumes one without printing it, when it is 0). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int damaged(const walker *w, const char *fmt, uint64_t a, uint64_t b) {
  char why[200];
  snprintf(why, sizeof why, fmt, (unsigned long long)a, (unsigned long long)b);
  return bc__error(BC_ECORRUPT, "%s: damaged: %s", w->path, why);
}
#pragma GCC diagnostic pop

/* Appends a free list record (count, then that many page numbers) found in
 * `dsize` bytes at `data`. */
static int add_free(walker *w, const unsigned char *data, uint64_t dsize,
                    uint64_t pgno) {
  if (dsize % 8 != 0 || dsize < 8)
    return damaged(w, "a free list record of %llu bytes (page %llu)", dsize, pgno);
  uint64_t n = ld64(data);
  if (n > dsize / 8 - 1)
    return damaged(w, "a free list record lists %llu pages in room for %llu",
                   n, dsize / 8 - 1);
  if (w->nfree + n + 1 > w->free_cap) {
    size_t cap = (w->nfree + n + 1) * 2;
    uint64_t *p = realloc(w->free_ids, cap * sizeof *p);
    if (p == NULL) return bc__error(BC_ENOMEM, "out of memory");
    w->free_ids = p;
    w->free_cap = cap;
  }
  memcpy(w->free_ids + w->nfree, data, (n + 1) * 8);
  w->nfree += n + 1;
  return 0;
}

/* LMDB's comparisons: memcmp then length (default), from the end
 * (MDB_REVERSEKEY), or as native unsigned integers of 4 or 8 bytes
 * (MDB_INTEGERKEY: sizes were checked). */
static int cmp_keys(unsigned flags, key a, key b) {
  if (flags & K_INTEGERKEY) {
    uint64_t x = a.n == 4 ? ld32(a.p) : ld64(a.p);
    uint64_t y = b.n == 4 ? ld32(b.p) : ld64(b.p);
    return x < y ? -1 : x > y;
  }
  size_t n = a.n < b.n ? a.n : b.n;
  if (flags & K_REVERSEKEY) {
    for (size_t i = 1; i <= n; i++)
      if (a.p[a.n - i] != b.p[b.n - i]) return a.p[a.n - i] < b.p[b.n - i] ? -1 : 1;
  } else {
    int c = n ? memcmp(a.p, b.p, n) : 0;
    if (c) return c;
  }
  return a.n < b.n ? -1 : a.n > b.n;
}

static int read_at(walker *w, void *buf, size_t n, uint64_t off) {
  ssize_t r = pread(w->fd, buf, n, (off_t)off);
  if (r < 0) return bc__error_errno(errno, "%s", w->path);
  if ((size_t)r != n)
    return damaged(w, "ends inside page %llu%.0llu", off / w->psize, 0);
  return 0;
}

/* Marks page `pg` reached; damage when it is outside the file or was
 * reached before. */
static int reach(walker *w, uint64_t pg) {
  if (pg < 2 || pg > w->last_pg)
    return damaged(w, "page number %llu outside [2, %llu]", pg, w->last_pg);
  if (pg >= w->file_pages)
    return damaged(w, "page %llu is past the end of the file (%llu pages)",
                   pg, w->file_pages);
  if (w->seen[pg / 8] & (1u << (pg % 8)))
    return damaged(w, "page %llu is reached twice%.0llu", pg, 0);
  w->seen[pg / 8] |= (unsigned char)(1u << (pg % 8));
  return 0;
}

typedef struct {
  unsigned flags;   /* the database's key flags */
  bool main;        /* the main tree: entries are named databases */
  bool free;        /* the free list: values are page lists */
  bool shards;      /* the engine's "shard" database */
  uint16_t depth;
  uint64_t entries, branch, leaf, overflow;
} tree;

static int leaf_value(walker *w, tree *t, const unsigned char *pg,
                      const unsigned char *node, unsigned nflags, uint64_t dsize,
                      key k, uint64_t pgno) {
  unsigned psize = w->psize;
  const unsigned char *data = node + NODESIZE + k.n;
  if (nflags & F_BIGDATA) {
    if (nflags != F_BIGDATA || t->main)
      return damaged(w, "page %llu: an entry has flags 0x%llx", pgno, nflags);
    if ((size_t)(data + 8 - pg) > psize)
      return damaged(w, "page %llu: an entry runs past the page%.0llu", pgno, 0);
    uint64_t ov = ld64(data);
    uint64_t need = (PAGEHDRSZ - 1 + dsize) / psize + 1;
    unsigned char hdr[PAGEHDRSZ];
    int rc = ov < 2 || ov > w->last_pg
                 ? damaged(w, "overflow page %llu outside the file (entry on "
                           "page %llu)", ov, pgno)
                 : read_at(w, hdr, sizeof hdr, ov * psize);
    if (rc != 0) return rc;
    uint32_t pages = ld32(hdr + 12);
    if (ld64(hdr) != ov || ld16(hdr + 10) != P_OVERFLOW || pages < need ||
        pages > w->last_pg - ov + 1)
      return damaged(w, "page %llu is not the overflow page of %llu pages its "
                     "entry needs", ov, need);
    for (uint64_t i = 0; i < pages; i++)
      if ((rc = reach(w, ov + i)) != 0) return rc;
    t->overflow += pages;
    if (t->free) {
      /* The size was checked against the overflow pages: bounded by the
       * file. */
      unsigned char *ids = malloc(dsize ? dsize : 1);
      if (ids == NULL) return bc__error(BC_ENOMEM, "out of memory");
      rc = read_at(w, ids, dsize, ov * psize + PAGEHDRSZ);
      if (rc == 0) rc = add_free(w, ids, dsize, pgno);
      free(ids);
      return rc;
    }
    return 0;
  }
  if ((size_t)(data - pg) + dsize > psize)
    return damaged(w, "page %llu: an entry of %llu bytes runs past the page",
                   pgno, dsize);
  if (t->main) {
    /* A named database. */
    if (nflags != F_SUBDATA || dsize != DB_SIZE || k.n == 0 || k.n > 63 ||
        w->nsub == sizeof w->sub / sizeof w->sub[0])
      return damaged(w, "page %llu: a main tree entry that is not a database "
                     "(flags 0x%llx)", pgno, nflags);
    w->sub[w->nsub] = db_decode(data);
    memcpy(w->sub_name[w->nsub], k.p, k.n);
    w->sub_len[w->nsub++] = k.n;
    return 0;
  }
  if (nflags != 0)
    return damaged(w, "page %llu: an entry has flags 0x%llx", pgno, nflags);
  if (t->free) return add_free(w, data, dsize, pgno);
  if (t->shards && (k.n != 8 || dsize != sizeof(bc__shard_rec) ||
                    ld32(data) != SHARD_PRESENT))
    w->suspect = true;
  return 0;
}

/* Walks the subtree rooted at page `pgno` at `level` (0: the root); its
 * keys must lie in [lo, hi) (a NULL p: unbounded). */
static int walk(walker *w, tree *t, uint64_t pgno, unsigned level, key lo,
                key hi) {
  int rc = reach(w, pgno);
  unsigned psize = w->psize;
  unsigned char *pg = w->pages + (size_t)level * psize;
  if (rc == 0) rc = read_at(w, pg, psize, pgno * psize);
  if (rc != 0) return rc;
  bool leaf = level + 1u == t->depth;
  uint16_t flags = ld16(pg + 10), lower = ld16(pg + 12), upper = ld16(pg + 14);
  if (ld64(pg) != pgno)
    return damaged(w, "page %llu says it is page %llu", pgno, ld64(pg));
  if (flags != (leaf ? P_LEAF : P_BRANCH))
    return damaged(w, "page %llu: flags 0x%llx do not fit its level in the "
                   "tree", pgno, flags);
  if (lower < PAGEHDRSZ || lower > upper || upper > psize || (lower & 1))
    return damaged(w, "page %llu: free space bounds %llu", pgno,
                   (uint64_t)lower << 16 | upper);
  unsigned n = (lower - PAGEHDRSZ) / 2u;
  if (n < 1) return damaged(w, "page %llu has no entries%.0llu", pgno, 0);
  if (leaf) t->leaf++;
  else t->branch++;
  key prev = {NULL, 0};
  for (unsigned i = 0; i < n; i++) {
    unsigned off = ld16(pg + PAGEHDRSZ + 2 * i);
    if (off < upper || off + NODESIZE > psize)
      return damaged(w, "page %llu: entry %llu is outside the page", pgno, i);
    const unsigned char *node = pg + off;
    unsigned nlo = ld16(node), nhi = ld16(node + 2), nflags = ld16(node + 4),
             ksize = ld16(node + 6);
    if (off + NODESIZE + ksize > psize)
      return damaged(w, "page %llu: key %llu runs past the page", pgno, i);
    key k = {node + NODESIZE, ksize};
    /* The first key of a branch page is not used (its child takes the
     * parent's lower bound). */
    bool keyed = leaf || i > 0;
    if (keyed) {
      if ((t->flags & K_INTEGERKEY) && ksize != 4 && ksize != 8)
        return damaged(w, "page %llu: an integer key of %llu bytes", pgno, ksize);
      /* Ascending keys: the first one against the lower bound, the last
       * one against the upper bound, each against the one before. */
      if ((prev.p ? cmp_keys(t->flags, k, prev) <= 0
                  : lo.p && cmp_keys(t->flags, k, lo) < 0) ||
          (i + 1 == n && hi.p && cmp_keys(t->flags, k, hi) >= 0))
        return damaged(w, "page %llu: key %llu is out of order", pgno, i);
      prev = k;
    }
    if (leaf) {
      t->entries++;
      uint64_t dsize = nlo | (uint64_t)nhi << 16;
      if (t->free && (ksize != 8 || ld64(k.p) > w->txnid))
        return damaged(w, "page %llu: free list key %llu is not a past "
                       "transaction", pgno, i);
      if ((rc = leaf_value(w, t, pg, node, nflags, dsize, k, pgno)) != 0)
        return rc;
    } else {
      uint64_t child = nlo | (uint64_t)nhi << 16 | (uint64_t)nflags << 32;
      key clo = i == 0 ? lo : k, chi = hi;
      if (i + 1 < n) {
        /* The next key bounds this child from above. */
        unsigned noff = ld16(pg + PAGEHDRSZ + 2 * (i + 1));
        if (noff < upper || noff + NODESIZE > psize ||
            noff + NODESIZE + ld16(pg + noff + 6) > psize)
          return damaged(w, "page %llu: entry %llu is outside the page", pgno,
                         i + 1);
        chi = (key){pg + noff + NODESIZE, ld16(pg + noff + 6)};
        if ((t->flags & K_INTEGERKEY) && chi.n != 4 && chi.n != 8)
          return damaged(w, "page %llu: an integer key of %llu bytes", pgno,
                         chi.n);
      }
      /* The child overwrites deeper buffers only: keys of this page stay. */
      if ((rc = walk(w, t, child, level + 1, clo, chi)) != 0) return rc;
    }
  }
  return 0;
}

/* Walks one database's tree and checks its recorded shape. */
static int walk_db(walker *w, const db_rec *d, tree *t, const char *name) {
  t->depth = d->depth;
  if (d->root == P_INVALID_V) {
    if (d->depth != 0 || d->entries != 0 || d->branch || d->leaf || d->overflow)
      return damaged(w, "an empty database with %llu entries, depth %llu",
                     d->entries, d->depth);
    return 0;
  }
  if (d->depth < 1 || d->depth > MAX_DEPTH)
    return damaged(w, "a tree of depth %llu (root page %llu)", d->depth, d->root);
  key none = {NULL, 0};
  int rc = walk(w, t, d->root, 0, none, none);
  if (rc == 0 && (t->entries != d->entries || t->branch != d->branch ||
                  t->leaf != d->leaf || t->overflow != d->overflow)) {
    char why[256];
    snprintf(why, sizeof why, "database %s: %llu entries and %llu/%llu/%llu "
             "branch/leaf/overflow pages recorded, %llu and %llu/%llu/%llu "
             "found", name, (unsigned long long)d->entries,
             (unsigned long long)d->branch, (unsigned long long)d->leaf,
             (unsigned long long)d->overflow, (unsigned long long)t->entries,
             (unsigned long long)t->branch, (unsigned long long)t->leaf,
             (unsigned long long)t->overflow);
    rc = bc__error(BC_ECORRUPT, "%s: %s", w->path, why);
  }
  return rc;
}

/* The free list's records: each sorted descending, pages in range, in no
 * tree and listed once. */
static int check_free(walker *w) {
  for (size_t i = 0; i < w->nfree;) {
    uint64_t n = w->free_ids[i++], prev = P_INVALID_V;
    for (uint64_t j = 0; j < n; j++, i++) {
      uint64_t pg = w->free_ids[i];
      if (pg < 2 || pg > w->last_pg || pg >= prev)
        return damaged(w, "the free list holds page %llu (after %llu)", pg, prev);
      if (w->seen[pg / 8] & (1u << (pg % 8)))
        return damaged(w, "page %llu is both free and in use (or freed "
                       "twice)%.0llu", pg, 0);
      w->seen[pg / 8] |= (unsigned char)(1u << (pg % 8));
      prev = pg;
    }
  }
  return 0;
}

int bc__state_validate(const char *path, uint64_t map_size, bool *claims) {
  walker w;
  memset(&w, 0, sizeof w);
  w.path = path;
  w.fd = open(path, O_RDONLY | O_CLOEXEC);
  *claims = false;
  if (w.fd < 0) return errno == ENOENT ? 0 : bc__error_errno(errno, "%s", path);
  int rc = 0;
  struct stat st;
  unsigned char m[2][META_OFF + META_SIZE];
  if (fstat(w.fd, &st) != 0) {
    rc = bc__error_errno(errno, "%s", path);
    goto cleanup;
  }
  if (st.st_size == 0) goto cleanup; /* LMDB starts an empty file afresh */
  w.psize = 4096; /* for messages until the real one is known */
  uint32_t psize = 0;
  for (int i = 0; i < 2 && rc == 0; i++) {
    rc = read_at(&w, m[i], sizeof m[i], (uint64_t)i * psize);
    if (rc != 0) break;
    const unsigned char *meta = m[i] + META_OFF;
    if (!(ld16(m[i] + 10) & P_META) || ld32(meta) != MDB_MAGIC_V || ld32(meta + 4) != 1)
      rc = damaged(&w, "meta page %llu is not an LMDB 0.9 meta page%.0llu", i, 0);
    uint32_t ps = ld32(meta + 24); /* the free database's pad */
    if (rc == 0 && (ps < 512 || ps > 65536 || (ps & (ps - 1)) || (i && ps != psize)))
      rc = damaged(&w, "meta page %llu: page size %llu", i, ps);
    psize = ps;
  }
  if (rc != 0) goto cleanup;
  w.psize = psize;
  w.file_pages = (uint64_t)st.st_size / psize;
  if (w.file_pages < 2) {
    rc = damaged(&w, "%llu bytes: not even its two meta pages%.0llu",
                 (uint64_t)st.st_size, 0);
    goto cleanup;
  }
  const unsigned char *m0 = m[0] + META_OFF, *m1 = m[1] + META_OFF;
  uint64_t t0 = ld64(m0 + 24 + 2 * DB_SIZE + 8), t1 = ld64(m1 + 24 + 2 * DB_SIZE + 8);
  int pick = t0 < t1; /* LMDB's choice (mdb_env_pick_meta) */
  const unsigned char *meta = pick ? m1 : m0;
  w.txnid = pick ? t1 : t0;
  w.last_pg = ld64(meta + 24 + 2 * DB_SIZE);
  db_rec freedb = db_decode(meta + 24), maindb = db_decode(meta + 24 + DB_SIZE);
  if ((w.txnid & 1) != (uint64_t)pick) {
    /* Transactions and readers take meta page (txnid & 1). */
    rc = damaged(&w, "meta page %llu holds transaction %llu", pick, w.txnid);
  } else if (w.last_pg < 1 || w.last_pg >= map_size / psize) {
    rc = damaged(&w, "last page %llu (map of %llu pages)", w.last_pg,
                 map_size / psize);
  } else if (freedb.flags != K_INTEGERKEY || maindb.flags != 0 || maindb.pad != 0) {
    rc = damaged(&w, "database flags 0x%llx/0x%llx", freedb.flags, maindb.flags);
  }
  if (rc != 0) goto cleanup;
  w.seen = calloc(w.last_pg / 8 + 1, 1);
  w.pages = malloc((size_t)psize * MAX_DEPTH);
  if (w.seen == NULL || w.pages == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  tree ft = {.flags = K_INTEGERKEY, .free = true};
  tree mt = {.flags = 0, .main = true};
  rc = walk_db(&w, &freedb, &ft, "free list");
  if (rc == 0) rc = walk_db(&w, &maindb, &mt, "main");
  for (size_t i = 0; rc == 0 && i < w.nsub; i++) {
    db_rec *d = &w.sub[i];
    char name[64];
    memcpy(name, w.sub_name[i], w.sub_len[i]);
    name[w.sub_len[i]] = '\0';
    if (d->flags & ~(unsigned)(K_REVERSEKEY | K_INTEGERKEY)) {
      rc = damaged(&w, "a database with flags 0x%llx%.0llu", d->flags, 0);
      break;
    }
    tree st2 = {.flags = d->flags, .shards = strcmp(name, "shard") == 0};
    rc = walk_db(&w, d, &st2, name);
  }
  if (rc == 0) rc = check_free(&w);
  if (rc == 0) *claims = w.suspect;
cleanup:
  free(w.seen);
  free(w.pages);
  free(w.free_ids);
  close(w.fd);
  return rc;
}
