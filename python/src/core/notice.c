/*
 * core/notice.c - the library's notices, delivered to Python's `logging`.
 *
 * The engine reports non-fatal news (a damaged shard regenerated, a state
 * rebuilt, an option of an existing root kept) through one process-wide
 * handler (bc_set_notice_handler).  Its default writes to file descriptor
 * 2, which Jupyter, contextlib.redirect_stderr and logging never see; the
 * extension installs this handler instead, which hands each message to the
 * logger "bagcache" at level WARNING, or, while logging has no handler for
 * it, writes it to sys.stderr (doc/python.md "Notices").
 *
 * The handler may run on any thread, with or without the GIL, and often
 * with engine mutexes held: it must never call Python.  It only copies the
 * message into a bounded queue (under notice_lock, a leaf lock: nothing is
 * locked or called while it is held) and asks the main thread to deliver
 * it (Py_AddPendingCall: callable without the GIL, from any thread).  The
 * queue is also emptied by bcpy_notices_flush(), which Python threads call
 * after the engine calls that raise notices (opening a cache, a read, a
 * close), so that a notice reaches the logger before that call returns to
 * its caller.  Delivery runs with the GIL held and no engine lock.
 *
 * Bounded: at most QUEUE_MAX messages wait; more are counted and reported
 * as one "N more notices were dropped" message.  At exit (the package's
 * atexit handler calls _notices_at_exit() once the loaders are closed, so
 * before the interpreter is torn down and Py_AddPendingCall would find no
 * interpreter; Py_AtExit as a last resort) queued and new messages go to
 * file descriptor 2 as the C default writes them.
 */
#include "core/bcpy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_MAX 256

static pthread_mutex_t notice_lock = PTHREAD_MUTEX_INITIALIZER;
static char *queue[QUEUE_MAX]; /* FIFO of malloc'd messages (notice_lock) */
static size_t queue_head, queue_count;
static unsigned long long queue_dropped; /* messages not queued (notice_lock) */
static atomic_size_t pending;            /* queue_count + dropped, for a cheap check */
static atomic_bool scheduled;            /* a pending call is asked for */
static atomic_bool python_gone;          /* finalizing: write to fd 2 */

static void to_stderr(const char *message) {
  fprintf(stderr, "bagcache: notice: %s\n", message);
}

/* Takes every queued message (notice_lock): *out a malloc'd array of *n
 * messages, *dropped the count not queued. */
static void take_all(char ***out, size_t *n, unsigned long long *dropped) {
  char **all = NULL;
  size_t count = 0;
  pthread_mutex_lock(&notice_lock);
  if (queue_count > 0 && (all = malloc(queue_count * sizeof *all)) != NULL) {
    for (; count < queue_count; count++) all[count] = queue[(queue_head + count) % QUEUE_MAX];
    queue_head = 0;
    queue_count = 0;
  }
  *dropped = queue_dropped;
  queue_dropped = 0;
  atomic_store(&pending, queue_count);
  pthread_mutex_unlock(&notice_lock);
  *out = all;
  *n = count;
}

static int deliver_pending(void *unused);

static void notice_to_queue(void *payload, const char *message) {
  (void)payload;
  if (atomic_load(&python_gone)) {
    to_stderr(message);
    return;
  }
  /* (A notice racing with _notices_at_exit may still be queued and ask for
   * a pending call; the interpreter is alive until the atexit handlers end.) */
  char *copy = strdup(message);
  pthread_mutex_lock(&notice_lock);
  if (copy != NULL && queue_count < QUEUE_MAX) {
    queue[(queue_head + queue_count) % QUEUE_MAX] = copy;
    queue_count++;
    copy = NULL;
  } else {
    queue_dropped++;
  }
  atomic_store(&pending, queue_count + (queue_dropped > 0));
  pthread_mutex_unlock(&notice_lock);
  free(copy);
  /* One pending call at a time: it empties the whole queue. */
  if (!atomic_exchange(&scheduled, true) && Py_AddPendingCall(deliver_pending, NULL) < 0)
    atomic_store(&scheduled, false); /* full: the next flush delivers */
}

/* Delivers one message (GIL held): to the logger "bagcache" at WARNING
 * when logging is configured for it (a handler on it or an ancestor),
 * nothing when its level is above WARNING, else as a line
 * "bagcache: notice: MESSAGE" on sys.stderr (what logging's last-resort
 * handler would do, with the library's name).  Anything that fails here
 * writes the message to fd 2 instead. */
static void emit(PyObject *logger, const char *message) {
  int ok = 0;
  if (logger != NULL) {
    PyObject *on = PyObject_CallMethod(logger, "isEnabledFor", "i", 30 /* WARNING */);
    int enabled = on == NULL ? -1 : PyObject_IsTrue(on);
    Py_XDECREF(on);
    PyObject *has = enabled > 0 ? PyObject_CallMethod(logger, "hasHandlers", NULL) : NULL;
    int handled = has == NULL ? -1 : PyObject_IsTrue(has);
    Py_XDECREF(has);
    if (enabled == 0) {
      ok = 1;
    } else if (handled > 0) {
      PyObject *r = PyObject_CallMethod(logger, "warning", "ss", "%s", message);
      ok = r != NULL;
      Py_XDECREF(r);
    } else if (handled == 0) {
      PyObject *err = PySys_GetObject("stderr"); /* borrowed */
      if (err == NULL || err == Py_None) {
        ok = 1; /* no stream (pythonw): like logging, say nothing */
      } else {
        PyObject *line = PyUnicode_FromFormat("bagcache: notice: %s\n", message);
        ok = line != NULL && PyFile_WriteObject(line, err, Py_PRINT_RAW) == 0;
        Py_XDECREF(line);
        PyObject *r = ok ? PyObject_CallMethod(err, "flush", NULL) : NULL;
        Py_XDECREF(r);
      }
    }
  }
  if (!ok) {
    PyErr_Clear();
    to_stderr(message);
  }
}

void bcpy_notices_flush_now(void) {
  char **all;
  size_t n;
  unsigned long long dropped;
  take_all(&all, &n, &dropped);
  if (n == 0 && dropped == 0) return;
  /* An exception being raised by the caller survives the delivery. */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *logger = NULL;
  PyObject *logging = PyImport_ImportModule("logging");
  if (logging != NULL) {
    logger = PyObject_CallMethod(logging, "getLogger", "s", "bagcache");
    Py_DECREF(logging);
  }
  if (logger == NULL) PyErr_Clear();
  for (size_t k = 0; k < n; k++) {
    emit(logger, all[k]);
    free(all[k]);
  }
  free(all);
  if (dropped > 0) {
    char message[96];
    snprintf(message, sizeof message, "%llu more notices were dropped (too many at once)",
             dropped);
    emit(logger, message);
  }
  Py_XDECREF(logger);
  PyErr_Restore(type, value, tb);
}

void bcpy_notices_flush(void) {
  if (atomic_load_explicit(&pending, memory_order_relaxed) != 0) bcpy_notices_flush_now();
}

static int deliver_pending(void *unused) {
  (void)unused;
  atomic_store(&scheduled, false); /* before taking: a later notice asks again */
  bcpy_notices_flush_now();
  return 0;
}

/* At the end of finalization: what is still queued goes to fd 2, and so
 * does every later notice (worker threads may outlive the interpreter). */
static void python_exit(void) {
  atomic_store(&python_gone, true);
  char **all;
  size_t n;
  unsigned long long dropped;
  take_all(&all, &n, &dropped);
  for (size_t k = 0; k < n; k++) {
    to_stderr(all[k]);
    free(all[k]);
  }
  free(all);
}

/* After fork in the child: the lock may have been held by a thread that is
 * not in the child; the queue's messages are the parent's to deliver. */
void bcpy_notices_after_fork(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  notice_lock = fresh;
  queue_head = 0;
  queue_count = 0; /* leaked copies: the parent frees its own */
  queue_dropped = 0;
  atomic_store(&pending, 0);
  atomic_store(&scheduled, false);
}

static PyObject *flush_notices(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  bcpy_notices_flush_now();
  Py_RETURN_NONE;
}

/* At exit, before finalization: what is queued is delivered, and later
 * notices go to fd 2 (no pending call is asked of an interpreter that is
 * going away). */
static PyObject *notices_at_exit(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  bcpy_notices_flush_now();
  atomic_store(&python_gone, true);
  bcpy_notices_flush_now(); /* one queued meanwhile */
  Py_RETURN_NONE;
}

static PyMethodDef notice_methods[] = {
    {"_flush_notices", flush_notices, METH_NOARGS,
     "_flush_notices()\n\nDelivers the queued notices to the logger 'bagcache' now."},
    {"_notices_at_exit", notices_at_exit, METH_NOARGS,
     "_notices_at_exit()\n\nDelivers the queued notices; later ones go to fd 2."},
    {NULL, NULL, 0, NULL}};

int bcpy_notices_init(PyObject *mod) {
  if (PyModule_AddFunctions(mod, notice_methods) < 0) return -1;
  if (Py_AtExit(python_exit) < 0) {
    PyErr_SetString(PyExc_RuntimeError, "Py_AtExit failed");
    return -1;
  }
  bc_set_notice_handler(notice_to_queue, NULL);
  return 0;
}
