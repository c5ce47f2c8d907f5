/*
 * train/pool.c - memory for batches that comes back when the last array on
 * it dies, so a loader's batches reuse pages that are already faulted in.
 *
 *   _BatchPool(nbytes, keep)
 *       pool.take([size]) -> a _BatchBlock: a writable buffer of `size`
 *       bytes (default nbytes).  Blocks of nbytes come from the pool's free
 *       list when it has one, else from malloc; a block of another size is
 *       allocated for the occasion (a short last batch) and freed with it.
 *       pool.clear() frees the free list; pool.free is its length.
 *   _BatchBlock
 *       owns its memory while it lives; its dealloc gives the memory back
 *       to the free list (at most `keep` blocks are kept; past that it is
 *       freed).  numpy.frombuffer(block, ...) makes the block the array's
 *       base, and every view of that array (numpy collapses bases), every
 *       memoryview or torch.from_numpy of it holds a reference to it: so
 *       the memory returns only once nothing can reach it.  That is the
 *       invariant: a block's memory is on the free list only while no
 *       object refers to its block.
 *
 * Why: batches allocated with np.empty by a loader's worker threads and
 * freed by the consumer's thread go back to glibc's per-thread arenas,
 * which trim and hand out fresh pages, so each batch of 786 kB page
 * faulted up to ~190 times (minor faults, 80-200 us of system time a batch
 * on the issue-17 benchmark).
 *
 * Locking: the free list has its own mutex (`lock`), held only around a
 * push or a pop and never while taking the GIL: the C loader's worker
 * threads (train/loader.c) take and give memory without the GIL
 * (bcpy_pool_take_mem, bcpy_pool_give_mem), blocks' deallocs give it back
 * with the GIL.  A block holds a strong reference to its pool; the pool
 * holds none, so blocks and pools make no cycles and need no GC support.
 * Whoever uses the C calls without the GIL holds a reference to the pool
 * for as long (the C loader: until its workers are joined).
 */
#include "train/pool.h"

#include "structmember.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  PyObject_HEAD
  Py_ssize_t nbytes; /* the size of pooled blocks */
  Py_ssize_t keep;   /* the most blocks the free list holds */
  Py_ssize_t nfree;  /* blocks on the free list: free_list[0..nfree) */
  void **free_list;  /* capacity keep */
  pthread_mutex_t lock; /* guards nfree and free_list */
} batch_pool;

typedef struct {
  PyObject_HEAD
  batch_pool *pool; /* strong reference */
  void *mem;        /* size bytes (at least 1 allocated), 64-byte aligned */
  Py_ssize_t size;
} batch_block;

static PyTypeObject batch_block_type;

/* 64 bytes: a cache line, and enough for any numpy dtype's alignment. */
static void *block_alloc(Py_ssize_t size) {
  size_t n = size > 0 ? ((size_t)size + 63) / 64 * 64 : 64;
  return aligned_alloc(64, n);
}

/* ---- _BatchBlock ---------------------------------------------------------- */

/* ---- memory without the GIL ----------------------------------------------- */

void *bcpy_pool_take_mem(PyObject *pool, size_t size) {
  batch_pool *p = (batch_pool *)pool;
  void *mem = NULL;
  if (size == (size_t)p->nbytes) {
    pthread_mutex_lock(&p->lock);
    if (p->nfree > 0) mem = p->free_list[--p->nfree];
    pthread_mutex_unlock(&p->lock);
  }
  return mem != NULL ? mem : block_alloc((Py_ssize_t)size);
}

void bcpy_pool_give_mem(PyObject *pool, void *mem, size_t size) {
  batch_pool *p = (batch_pool *)pool;
  if (mem == NULL) return;
  if (p != NULL && size == (size_t)p->nbytes) {
    pthread_mutex_lock(&p->lock);
    bool kept = p->nfree < p->keep;
    if (kept) p->free_list[p->nfree++] = mem;
    pthread_mutex_unlock(&p->lock);
    if (kept) return;
  }
  free(mem);
}

PyObject *bcpy_pool_wrap(PyObject *pool, void *mem, size_t size) {
  batch_block *b = PyObject_New(batch_block, &batch_block_type);
  if (b == NULL) {
    bcpy_pool_give_mem(pool, mem, size);
    return NULL;
  }
  b->mem = mem;
  b->size = (Py_ssize_t)size;
  b->pool = (batch_pool *)Py_NewRef(pool);
  return (PyObject *)b;
}

static void block_dealloc(batch_block *self) {
  batch_pool *p = self->pool;
  if (p != NULL)
    bcpy_pool_give_mem((PyObject *)p, self->mem, (size_t)self->size);
  else
    free(self->mem);
  Py_XDECREF(p);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int block_getbuffer(batch_block *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, (PyObject *)self, self->mem, self->size, 0, flags);
}

static PyBufferProcs block_as_buffer = {
    .bf_getbuffer = (getbufferproc)block_getbuffer,
};

static Py_ssize_t block_len(batch_block *self) { return self->size; }

static PySequenceMethods block_as_sequence = {
    .sq_length = (lenfunc)block_len,
};

static PyTypeObject batch_block_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._BatchBlock",
    .tp_basicsize = sizeof(batch_block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_as_sequence = &block_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A writable buffer from a _BatchPool; its memory returns to the pool "
              "when it dies.",
};

/* ---- _BatchPool ----------------------------------------------------------- */

static void pool_clear_list(batch_pool *self) {
  pthread_mutex_lock(&self->lock);
  while (self->nfree > 0) free(self->free_list[--self->nfree]);
  pthread_mutex_unlock(&self->lock);
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"nbytes", "keep", NULL};
  Py_ssize_t nbytes, keep;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn:_BatchPool", kwlist, &nbytes, &keep))
    return NULL;
  if (nbytes < 0 || keep < 0) {
    PyErr_SetString(PyExc_ValueError, "_BatchPool: nbytes and keep must be >= 0");
    return NULL;
  }
  if ((size_t)keep > SIZE_MAX / sizeof(void *) / 2) {
    PyErr_SetString(PyExc_ValueError, "_BatchPool: keep is too large");
    return NULL;
  }
  batch_pool *self = (batch_pool *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->nbytes = nbytes;
  self->keep = keep;
  /* The list is freed with plain free(): a block may come back from a thread
   * without the GIL (bcpy_pool_give_mem), PyMem_Calloc needs it. */
  self->free_list = calloc(keep > 0 ? (size_t)keep : 1, sizeof(void *));
  if (self->free_list == NULL || pthread_mutex_init(&self->lock, NULL) != 0) {
    free(self->free_list);
    self->free_list = NULL; /* pool_dealloc: the mutex was not made */
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  return (PyObject *)self;
}

static void pool_dealloc(batch_pool *self) {
  /* No block is alive here: each holds a reference to the pool. */
  if (self->free_list != NULL) {
    pool_clear_list(self);
    pthread_mutex_destroy(&self->lock);
    free(self->free_list);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pool_take(batch_pool *self, PyObject *args) {
  Py_ssize_t size = self->nbytes;
  if (!PyArg_ParseTuple(args, "|n:take", &size)) return NULL;
  if (size < 0) {
    PyErr_SetString(PyExc_ValueError, "take: size must be >= 0");
    return NULL;
  }
  void *mem = bcpy_pool_take_mem((PyObject *)self, (size_t)size);
  if (mem == NULL) return PyErr_NoMemory();
  return bcpy_pool_wrap((PyObject *)self, mem, (size_t)size);
}

static PyObject *pool_clear(batch_pool *self, PyObject *unused) {
  (void)unused;
  pool_clear_list(self);
  Py_RETURN_NONE;
}

static PyObject *pool_get_free(batch_pool *self, void *closure) {
  (void)closure;
  pthread_mutex_lock(&self->lock);
  Py_ssize_t n = self->nfree;
  pthread_mutex_unlock(&self->lock);
  return PyLong_FromSsize_t(n);
}

static PyMethodDef pool_methods[] = {
    {"take", (PyCFunction)pool_take, METH_VARARGS,
     "take([size]) -> a writable buffer of size bytes (default: the pool's nbytes), "
     "from the free list when it has one; it returns there when it dies."},
    {"clear", (PyCFunction)pool_clear, METH_NOARGS, "Frees the blocks on the free list."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef pool_getset[] = {
    {"free", (getter)pool_get_free, NULL, "Blocks on the free list.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef pool_members[] = {
    {"nbytes", T_PYSSIZET, offsetof(batch_pool, nbytes), READONLY,
     "The size of pooled blocks."},
    {"keep", T_PYSSIZET, offsetof(batch_pool, keep), READONLY,
     "The most blocks the free list holds."},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject batch_pool_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._BatchPool",
    .tp_basicsize = sizeof(batch_pool),
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "_BatchPool(nbytes, keep): batch memory that returns when the last "
              "object on it dies (at most keep free blocks are kept).",
    .tp_methods = pool_methods,
    .tp_members = pool_members,
    .tp_getset = pool_getset,
    .tp_new = pool_new,
};

bool bcpy_is_batch_pool(PyObject *obj) { return Py_TYPE(obj) == &batch_pool_type; }

int bcpy_train_pool_init(PyObject *mod) {
  if (PyType_Ready(&batch_block_type) < 0) return -1;
  return bcpy_add_type(mod, &batch_pool_type, "_BatchPool");
}
