/* A deliberate data race, loaded into the ThreadSanitizer interpreter by
 * `make check-python-threads` before the tests run: unless ThreadSanitizer
 * reports it, the step would prove nothing (the runtime not active in
 * extension code, or options that hide reports). */
#include <pthread.h>
#include <stddef.h>

int bc_tsan_canary(void);

static int bc_tsan_canary_counter;

static void *bump(void *arg) {
  (void)arg;
  bc_tsan_canary_counter++; /* unsynchronised with the caller's increment */
  return NULL;
}

/* Returns 2 (the race does no harm here), or -1 if no thread started. */
int bc_tsan_canary(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, bump, NULL) != 0) return -1;
  bc_tsan_canary_counter++;
  pthread_join(t, NULL);
  return bc_tsan_canary_counter;
}
