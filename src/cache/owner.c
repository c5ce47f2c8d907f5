/* Process identities for claims: a pid alone can be reused after the
 * process dies, so a claim also records the process's start time
 * (/proc/PID/stat field 22), and an owner is alive only if both match. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"

/* The start time of `pid` in clock ticks since boot; 0 if unknown.
 * *zombie tells whether the process has exited but was not reaped yet. */
static uint64_t start_time_of(pid_t pid, bool *zombie) {
  *zombie = false;
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The command name (field 2) may hold spaces: start after its ')'. */
  char *p = strrchr(buf, ')');
  if (p == NULL) return 0;
  *zombie = p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
  unsigned long long v = 0;
  /* fields 3..22: skip 19 fields, then read the start time */
  p++;
  for (int field = 3; field < 22 && p != NULL; field++) p = strchr(p + 1, ' ');
  if (p == NULL || sscanf(p, " %llu", &v) != 1) return 0;
  return v;
}

bc__owner bc__owner_self(void) {
  pid_t pid = getpid();
  bool zombie;
  return (bc__owner){(int32_t)pid, start_time_of(pid, &zombie)};
}

bool bc__owner_alive(bc__owner o) {
  if (o.pid <= 0) return false;
  if (kill((pid_t)o.pid, 0) != 0 && errno != EPERM) return false;
  bool zombie;
  uint64_t st = start_time_of((pid_t)o.pid, &zombie);
  if (zombie) return false; /* exited; its parent has not reaped it yet */
  /* Without /proc we cannot tell a reused pid apart: assume alive. */
  return st == 0 || o.start_time == 0 || st == o.start_time;
}
