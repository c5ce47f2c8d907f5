/*
 * replay.c - runs the fuzz target over saved inputs without libFuzzer.
 *
 *   replay [--no-fork] PATH...
 *
 * Each PATH is an input file or a directory of them (read in name order).
 * Every input runs in a child process, so one failing input (an abort from
 * a violated property, or a sanitizer report) is counted and named and the
 * others still run; --no-fork runs them all in this process (for debuggers
 * and valgrind; the first failure then ends the run).  Prints
 * "replay: N inputs, F failures" and exits 1 when F > 0 or nothing ran.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

static bool fork_each = true;
static unsigned long inputs, failures;

/* Runs one input; returns false when it failed. */
static bool run_one(const char *path) {
  unsigned char *data = NULL;
  size_t size = 0;
  if (!fz_read_file(path, &data, &size)) {
    fprintf(stderr, "replay: %s: no such file\n", path);
    return false;
  }
  bool ok = true;
  if (!fork_each) {
    LLVMFuzzerTestOneInput(data, size);
  } else {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "replay: fork: %s\n", strerror(errno));
      ok = false;
    } else if (pid == 0) {
      LLVMFuzzerTestOneInput(data, size);
      exit(0);
    } else {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (WIFSIGNALED(status)) {
        fprintf(stderr, "replay: FAIL %s (signal %d)\n", path,
                WTERMSIG(status));
        ok = false;
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "replay: FAIL %s (exit %d)\n", path,
                WEXITSTATUS(status));
        ok = false;
      }
    }
  }
  free(data);
  return ok;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs a file, or every regular file of a directory in name order. */
static void run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    inputs++, failures++;
    return;
  }
  if (!S_ISDIR(st.st_mode)) {
    inputs++;
    if (!run_one(path)) failures++;
    return;
  }
  DIR *d = opendir(path);
  if (d == NULL) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    inputs++, failures++;
    return;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue; /* ., .., hidden files */
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **p = realloc(names, cap * sizeof *names);
      if (p == NULL) abort();
      names = p;
    }
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (names[n] == NULL) abort();
    snprintf(names[n], len, "%s/%s", path, e->d_name);
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; i++) {
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      inputs++;
      if (!run_one(names[i])) failures++;
    }
    free(names[i]);
  }
  free(names);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

int main(int argc, char **argv) {
  int first = 1;
  if (argc > 1 && strcmp(argv[1], "--no-fork") == 0) {
    fork_each = false;
    first = 2;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: replay [--no-fork] FILE-OR-DIR...\n");
    return 2;
  }
  /* Children leave their scratch directories behind when they abort: give
   * them one parent directory and remove it at the end. */
  const char *base = getenv("TMPDIR");
  char scratch[PATH_MAX];
  snprintf(scratch, sizeof scratch, "%s/bc-replay.XXXXXX",
           base && base[0] ? base : "/tmp");
  if (mkdtemp(scratch) == NULL) {
    fprintf(stderr, "replay: mkdtemp(%s): %s\n", scratch, strerror(errno));
    return 2;
  }
  setenv("TMPDIR", scratch, 1);

  for (int i = first; i < argc; i++) run_path(argv[i]);

  nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  printf("replay: %lu inputs, %lu failures\n", inputs, failures);
  return failures == 0 && inputs > 0 ? 0 : 1;
}
