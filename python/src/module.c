/*
 * module.c - the module object of bagcache._bagcache: type registration,
 * the mapping of bagcache error codes to Python exceptions, the main
 * thread's interrupt handler (Ctrl-C), and the work that runs on a thread
 * of its own.
 *
 * Blocking calls run in the calling thread with the GIL released: Ctrl-C
 * reaches their waits through the main thread's interrupt handler, so no
 * call is handed to a helper to keep the main thread responsive.  Two
 * kinds of work still go to a detached thread of their own
 * (bcpy_run_detached):
 *   - teardown from inside a source callback (bcpy_in_callback): closing a
 *     cache or dropping a sequence there could join or free the calling
 *     thread's own engine state (it may be a fill worker in mid-fill);
 *   - closing a read-ahead whose reads in flight may be long fills, so
 *     that dropping an iterator never blocks (core/iterator.c).
 * Such work is rare and short-lived, so each call gets a thread of its own
 * (no pool).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/bcpy.h"

PyObject *bcpy_InvalidSliceError;
PyObject *bcpy_CorruptError;

/* The exception class for a code (borrowed; OSError for BC_EIO and
 * BC_ENOSPC, whose subclass depends on the errno). */
static PyObject *error_type(int code) {
  switch (code) {
    case BC_ERANGE: return PyExc_IndexError;
    case BC_ENOTFOUND: return PyExc_FileNotFoundError;
    case BC_ENOMEM: return PyExc_MemoryError;
    case BC_ECORRUPT: return bcpy_CorruptError;
    case BC_EPERM: return PyExc_PermissionError;
    case BC_EIO:
    case BC_ENOSPC: return PyExc_OSError;
    /* Only caches (loadit.c) report these. */
    case BC_ENOTCACHED: return bcpy_NotCachedError;
    case BC_ENONDET: return bcpy_NondeterministicError;
    default: return PyExc_ValueError;
  }
}

/* The errno an OSError for `code` carries: the failure's own when it is
 * one of the code's (bc_errno() describes the failure; an errno of another
 * kind would be a stale one), else the code's usual one. */
static int os_errno(int code, int sys_errno) {
  switch (code) {
    case BC_ENOTFOUND:
      return sys_errno == ENOENT || sys_errno == ENOTDIR ? sys_errno : ENOENT;
    case BC_ENOSPC:
      return sys_errno == ENOSPC || sys_errno == EDQUOT || sys_errno == EFBIG
                 ? sys_errno : ENOSPC;
    case BC_EPERM:
      return sys_errno == EACCES || sys_errno == EPERM || sys_errno == EROFS
                 ? sys_errno : EACCES;
    case BC_EIO:
      return sys_errno > 0 && sys_errno != ENOENT && sys_errno != ENOTDIR &&
                     sys_errno != ENOSPC && sys_errno != EDQUOT && sys_errno != EFBIG &&
                     sys_errno != EACCES && sys_errno != EPERM && sys_errno != EROFS &&
                     sys_errno != ENOMEM && sys_errno != EINVAL
                 ? sys_errno : EIO;
    default:
      return 0;
  }
}

PyObject *bcpy_raise(int code, const char *message) {
  bool own = message == NULL || message[0] == '\0' || message == bc_errmsg();
  return bcpy_raise_errno(code, own ? bc_errno() : 0, message);
}

/* Sets the exception for `code` (see bcpy_raise_errno). */
static void set_exception(int code, int sys_errno, const char *message);
static void set_nondet(const char *message);

PyObject *bcpy_raise_errno(int code, int sys_errno, const char *message) {
  set_exception(code, sys_errno, message);
  /* The thread's error is reported: its payload (an exception) goes. */
  bc_error_clear();
  bcpy_notices_flush(); /* what the failing call said before (kept exception) */
  return NULL;
}

static void set_exception(int code, int sys_errno, const char *message) {
  if (message == NULL || message[0] == '\0') message = bc_errmsg();
  if (message[0] == '\0') message = bc_strerror(code);
  if (code == BC_ECANCELED) {
    /* The interrupt handler of the main thread (interrupt.c) left the
     * exception a signal handler raised (KeyboardInterrupt). */
    if (PyErr_Occurred()) return;
    /* Another handler (a C caller's, set in this thread): OSError(EINTR). */
    PyObject *exc = PyObject_CallFunction(PyExc_InterruptedError, "is", EINTR, message);
    if (exc != NULL) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
    return;
  }
  if (code == BC_ESOURCE) {
    /* A cache's source raised: that exception itself, from the failure's
     * payload (this thread's, or the filler's carried to it). */
    PyObject *exc = bcpy_payload_exception();
    if (exc != NULL) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    } else {
      PyErr_SetString(bcpy_SourceError, message);
    }
    return;
  }
  int err = os_errno(code, sys_errno);
  if (err != 0) {
    /* OSError(errno, message): the errno picks the subclass (EACCES and
     * EPERM PermissionError, ETIMEDOUT TimeoutError, ...); a missing file
     * stays FileNotFoundError whatever the errno (ENOTDIR too). */
    PyObject *type = code == BC_ENOTFOUND ? PyExc_FileNotFoundError : PyExc_OSError;
    PyObject *exc = PyObject_CallFunction(type, "is", err, message);
    if (exc != NULL) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
    return;
  }
  if (code == BC_ENONDET && strstr(message, "cache clear") == NULL) {
    set_nondet(message);
    return;
  }
  PyErr_SetString(error_type(code), message);
}

/* NondeterministicError, saying how to start over (unless the engine's
 * message does, as the CLI's report does).  The engine's messages begin
 * with the root ("ROOT: shard 3 ..."): the advice names it when
 * that prefix is a cache's directory. */
static void set_nondet(const char *message) {
  if (strstr(message, "cache clear") != NULL) { /* the engine said it already */
    PyErr_SetString(bcpy_NondeterministicError, message);
    return;
  }
  const char *colon = strstr(message, ": ");
  char root[4096] = "";
  if (colon != NULL && (size_t)(colon - message) + sizeof "/metadata.json" < sizeof root) {
    char meta[4096 + sizeof "/metadata.json"];
    memcpy(root, message, (size_t)(colon - message));
    root[colon - message] = '\0';
    snprintf(meta, sizeof meta, "%s/metadata.json", root);
    struct stat st;
    if (stat(meta, &st) != 0) root[0] = '\0';
  }
  size_t n = strlen(message);
  bool known = strstr(message, "changed since the cache was filled") != NULL;
  PyErr_Format(bcpy_NondeterministicError,
               "%s%s  %s start over: delete what is cached with `bagcache cache clear %s` "
               "(no process may be using it), or give LoadIt a new root_dir",
               message, n > 0 && message[n - 1] == '.' ? "" : ".",
               known ? "To" : "If the source changed since the cache was filled,",
               root[0] ? root : "ROOT");
}

/* ---- Ctrl-C ----------------------------------------------------------------
 *
 * The main thread's interrupt handler (bc_set_interrupt_handler): every
 * wait of the engine in that thread polls it about every 10 ms, with the
 * GIL released.  It takes the GIL and runs Python's signal handlers
 * (PyErr_CheckSignals); when one raises (KeyboardInterrupt), the exception
 * is left pending and the wait returns BC_ECANCELED, which bcpy_raise
 * turns into that exception.  Until the exception is handled, later polls
 * say stop at once (a call that cleans up after an interrupt does not wait
 * again).  An exception pending for another reason is left alone, and
 * signals are not checked then. */
static PyObject *interrupt_raised; /* the exception a poll raised (GIL) */

static int main_interrupt(void *ctx) {
  (void)ctx;
  if (bcpy_finalizing()) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  int stop = 0;
  if (PyErr_Occurred()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    stop = value != NULL && value == interrupt_raised;
    PyErr_Restore(type, value, tb);
  } else {
    Py_CLEAR(interrupt_raised); /* handled since */
    if (PyErr_CheckSignals() < 0) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyErr_NormalizeException(&type, &value, &tb);
      Py_XINCREF(value);
      interrupt_raised = value;
      PyErr_Restore(type, value, tb);
      stop = 1;
    }
  }
  PyGILState_Release(gil);
  return stop;
}

void bcpy_interrupt_install(void) { bc_set_interrupt_handler(main_interrupt, NULL); }

/* ---- threads ------------------------------------------------------------------ */

_Thread_local int bcpy_in_callback;

/* The thread that runs Python signal handlers (the forking thread in a
 * child: CPython makes it the main thread there). */
static pthread_t main_thread;

bool bcpy_is_main_thread(void) { return pthread_equal(pthread_self(), main_thread); }

/* Forks this process's line has been through (children count one more). */
static atomic_uint forks;

unsigned bcpy_forks(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }

static void after_fork_child(void) {
  atomic_fetch_add(&forks, 1);
  main_thread = pthread_self();
  bcpy_notices_after_fork();
  bcpy_interrupt_install(); /* this thread runs the signal handlers now */
}

/* Learns which thread is the main one.  The module may be imported from
 * any thread: threading.main_thread() tells its ident, which is the
 * pthread_t there (CPython's thread ident is pthread_self()). */
static int threads_init(void) {
  PyObject *threading = PyImport_ImportModule("threading");
  if (threading == NULL) return -1;
  PyObject *mt = PyObject_CallMethod(threading, "main_thread", NULL);
  Py_DECREF(threading);
  if (mt == NULL) return -1;
  PyObject *ident = PyObject_GetAttrString(mt, "ident");
  Py_DECREF(mt);
  if (ident == NULL) return -1;
  unsigned long id = PyLong_AsUnsignedLong(ident);
  Py_DECREF(ident);
  if (id == (unsigned long)-1 && PyErr_Occurred()) return -1;
  main_thread = (pthread_t)id;
  if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
    return -1;
  }
  return 0;
}

static void *detached_main(void *arg) {
  bcpy_call *c = arg;
  bcpy_call_run(c);
  c->free(c);
  bc_error_clear(); /* a payload (an exception) is released before the exit */
  return NULL;
}

int bcpy_run_detached(bcpy_call *c) {
  pthread_attr_t attr;
  pthread_t t;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, detached_main, c);
  pthread_attr_destroy(&attr);
  return err == 0 ? 0 : -1;
}

/* Run by the main thread (Py_AddPendingCall) when the module is imported
 * in another one. */
static int install_pending(void *unused) {
  (void)unused;
  bcpy_interrupt_install();
  return 0;
}

static PyObject *version(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  return PyUnicode_FromString(bc_version());
}

/* bc_parse_size for Python's size strings: the CLI's parser. */
static PyObject *parse_size(PyObject *mod, PyObject *arg) {
  (void)mod;
  const char *text = PyUnicode_AsUTF8(arg);
  if (text == NULL) return NULL;
  uint64_t n = 0;
  int rc = bc_parse_size(text, &n);
  if (rc != 0) return bcpy_raise(rc, NULL);
  return PyLong_FromUnsignedLongLong(n);
}

static PyMethodDef module_methods[] = {
    {"version", version, METH_NOARGS,
     "version() -> str\n\nThe version of the bagcache library in use."},
    {"parse_size", parse_size, METH_O,
     "parse_size(text) -> int\n\nBytes in a size such as '64mb', '2GiB', '1.5 GB' (powers of "
     "1024, any case; the CLI's SIZE); ValueError otherwise."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "bagcache._bagcache",
    "C core of the bagcache package: Bagz readers, writers and indexes.\n\n"
    "Use the `bagcache` package; this module is its implementation.",
    -1,
    module_methods,
    NULL, NULL, NULL, NULL};

int bcpy_add_type(PyObject *mod, PyTypeObject *type, const char *name) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(mod, name, (PyObject *)type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

int bcpy_add_exception(PyObject *mod, PyObject **slot, const char *name, PyObject *base,
                       const char *doc) {
  char full[128];
  snprintf(full, sizeof full, "bagcache.%s", name);
  *slot = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
  if (*slot == NULL) return -1;
  Py_INCREF(*slot);
  if (PyModule_AddObject(mod, name, *slot) < 0) {
    Py_DECREF(*slot);
    return -1;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__bagcache(void);

PyMODINIT_FUNC PyInit__bagcache(void) {
  PyObject *mod = PyModule_Create(&module_def);
  if (mod == NULL) return NULL;
  if (threads_init() < 0 || bcpy_add_type(mod, &bcpy_Sequence_Type, "_Sequence") < 0 ||
      bcpy_add_type(mod, &bcpy_SeqBase_Type, "_SeqBase") < 0 ||
      bcpy_add_type(mod, &bcpy_ReaderBase_Type, "_ReaderBase") < 0 ||
      bcpy_add_type(mod, &bcpy_Iterator_Type, "ReaderIterator") < 0 ||
      bcpy_add_type(mod, &bcpy_WriterBase_Type, "_WriterBase") < 0 ||
      bcpy_add_type(mod, &bcpy_Index_Type, "Index") < 0 ||
      bcpy_add_type(mod, &bcpy_MultiIndex_Type, "MultiIndex") < 0 ||
      bcpy_add_type(mod, &bcpy_View_Type, "_View") < 0 ||
      bcpy_add_type(mod, &bcpy_ViewIterator_Type, "ViewIterator") < 0 ||
      bcpy_loadit_init(mod) < 0 || bcpy_train_init(mod) < 0 ||
      bcpy_notices_init(mod) < 0)
    goto fail;
  /* (TypeError, IndexError): bagz raises TypeError for a bad slice,
   * sackli IndexError("Invalid slice"); this one satisfies both. */
  PyObject *bases = PyTuple_Pack(2, PyExc_TypeError, PyExc_IndexError);
  if (bases == NULL) goto fail;
  int made = bcpy_add_exception(mod, &bcpy_InvalidSliceError, "InvalidSliceError", bases,
                                "A slice whose bounds are not integers.");
  Py_DECREF(bases);
  if (made < 0 ||
      bcpy_add_exception(mod, &bcpy_CorruptError, "CorruptError", PyExc_ValueError,
                         "Damaged data: a file that is not valid Bagz, a record whose bytes "
                         "changed on disk (its checksum fails), a file that shrank while "
                         "open.") < 0)
    goto fail;
  if (PyModule_AddIntConstant(mod, "CHUNK", BCPY_CHUNK) < 0) goto fail;
  if (bcpy_is_main_thread()) bcpy_interrupt_install();
  else if (Py_AddPendingCall(install_pending, NULL) < 0) goto fail;
  return mod;
fail:
  Py_DECREF(mod);
  return NULL;
}
