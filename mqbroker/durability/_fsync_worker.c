/* fsync on a thread that never takes the interpreter lock; completions through an eventfd.
 *
 * The ``worker`` fsync engine (mqbroker/durability/sync_engines.py, ``WorkerSync``) hands a round's
 * descriptors to ``FsyncWorker.submit``: a queue append and a condition signal, so the reactor never
 * waits for the disk or the kernel. The worker thread takes everything queued and submits it as Linux
 * AIO fsyncs (``io_submit`` of ``IOCB_CMD_FSYNC``: the kernel runs them in parallel, so they share the
 * journal's commits; one after another, each waits for a commit of its own). ``io_submit`` can block in
 * the kernel for milliseconds (it queues each fsync on a kernel worker bound to the submitting CPU, which
 * may take that CPU at once): here it blocks this thread, not the reactor. The kernel counts each
 * finished fsync on the eventfd the reactor watches like a socket, and ``completed()`` (on the reactor)
 * reaps the finished fsyncs without waiting: a completion reaches the reactor as directly as with
 * ``io_submit`` on the reactor, with no hop through this thread. What the thread syncs itself, fsync(2)
 * one descriptor after another (no AIO here: ``io_setup`` refused; a block ``io_submit`` refuses, e.g. a
 * file system without AIO fsync; or reaped while the ring was full), goes to the completed list, counted
 * on the same eventfd.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* SCHED_BATCH */
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* AIO fsyncs in flight at most (the kernel context's size); a larger batch goes in chunks. */
#define AIO_SLOTS 256

typedef struct {
    int *items;
    Py_ssize_t length;
    Py_ssize_t capacity;
} IntList;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    IntList queued;    /* descriptors to fsync */
    IntList completed; /* pairs: descriptor, 0 or -errno */
    int eventfd;
    int stopping;
    int running;       /* the thread was started and not yet joined */
    aio_context_t aio; /* 0: no AIO here, fsync(2) one by one */
} FsyncWorker;

static int
int_list_append(IntList *list, int value)
{
    if (list->length == list->capacity) {
        Py_ssize_t capacity = list->capacity ? list->capacity * 2 : 16;
        int *items = realloc(list->items, (size_t)capacity * sizeof(int));
        if (items == NULL) {
            return -1;
        }
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->length++] = value;
    return 0;
}

static void
report(FsyncWorker *self, const int *pairs, Py_ssize_t count)
{
    /* ``count`` (descriptor, 0 or -errno) pairs the thread synced or reaped: to the completed list, counted. */
    pthread_mutex_lock(&self->lock);
    for (Py_ssize_t index = 0; index < 2 * count; index++) {
        if (int_list_append(&self->completed, pairs[index])) {
            abort(); /* out of memory for a few ints: the durability bookkeeping cannot go on */
        }
    }
    pthread_mutex_unlock(&self->lock);
}

static void
signal_reactor(FsyncWorker *self)
{
    uint64_t one = 1;
    while (write(self->eventfd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

static void
fsync_one(FsyncWorker *self, int handle)
{
    int pair[2] = {handle, fsync(handle) == 0 ? 0 : -errno};
    report(self, pair, 1);
}

static void
reap_into_completed(FsyncWorker *self)
{
    /* The ring is full: wait for some fsyncs to finish and report them here (the kernel counted them already).
     * The reactor reaps too and may take them all first: wait 1 ms at most, then the caller tries again. */
    struct io_event events[AIO_SLOTS];
    int pairs[2 * AIO_SLOTS];
    struct timespec a_while = {0, 1000000};
    long got = syscall(SYS_io_getevents, self->aio, 1, AIO_SLOTS, events, &a_while);
    for (long index = 0; index < got; index++) {
        pairs[2 * index] = (int)events[index].data;
        pairs[2 * index + 1] = (int)events[index].res;
    }
    if (got > 0) {
        report(self, pairs, got);
        signal_reactor(self); /* the reactor may have heard the kernel's count before these were in the list */
    }
}

static void
aio_submit_all(FsyncWorker *self, const int *handles, Py_ssize_t count)
{
    /* Submit ``count`` fsyncs; each one's completion is counted on the eventfd by the kernel. */
    struct iocb blocks[AIO_SLOTS];
    struct iocb *pointers[AIO_SLOTS];
    Py_ssize_t next = 0;
    while (next < count) {
        Py_ssize_t chunk = count - next < AIO_SLOTS ? count - next : AIO_SLOTS;
        memset(blocks, 0, (size_t)chunk * sizeof blocks[0]);
        for (Py_ssize_t index = 0; index < chunk; index++) {
            blocks[index].aio_lio_opcode = IOCB_CMD_FSYNC;
            blocks[index].aio_fildes = (uint32_t)handles[next + index];
            blocks[index].aio_data = (uint64_t)handles[next + index];
            blocks[index].aio_flags = IOCB_FLAG_RESFD;
            blocks[index].aio_resfd = (uint32_t)self->eventfd;
            pointers[index] = &blocks[index];
        }
        long taken = syscall(SYS_io_submit, self->aio, chunk, pointers);
        if (taken > 0) {
            next += taken;
        } else if (taken < 0 && errno == EINTR) {
        } else if (taken == 0 || errno == EAGAIN) {
            reap_into_completed(self); /* the ring is full: make room */
        } else { /* the first block was refused (not open, a file system without AIO fsync...): fsync(2) says */
            fsync_one(self, handles[next++]);
            signal_reactor(self);
        }
    }
}

static void *
worker_main(void *argument)
{
    FsyncWorker *self = argument;
    IntList batch = {NULL, 0, 0};
    /* A batch thread does not preempt the thread that wakes it (the reactor, handing over a round): it runs on an
     * idle CPU, or once the reactor waits or its time slice ends. Where that is refused it stays a normal thread. */
    struct sched_param no_priority = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &no_priority);
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (self->queued.length == 0 && !self->stopping) {
            pthread_cond_wait(&self->wake, &self->lock);
        }
        if (self->queued.length == 0) {
            break; /* stopping, and nothing left to sync */
        }
        IntList taken = self->queued; /* swap the queue for the (empty) batch list */
        self->queued = batch;
        self->queued.length = 0;
        batch = taken;
        pthread_mutex_unlock(&self->lock);
        if (self->aio) {
            aio_submit_all(self, batch.items, batch.length);
        } else {
            for (Py_ssize_t index = 0; index < batch.length; index++) {
                fsync_one(self, batch.items[index]);
            }
            signal_reactor(self);
        }
        batch.length = 0;
        pthread_mutex_lock(&self->lock);
    }
    pthread_mutex_unlock(&self->lock);
    free(batch.items);
    return NULL;
}

static PyObject *
worker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"aio", NULL};
    int use_aio = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:FsyncWorker", keywords, &use_aio)) {
        return NULL;
    }
    FsyncWorker *self = (FsyncWorker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->eventfd = -1;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->eventfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    if (use_aio && syscall(SYS_io_setup, AIO_SLOTS, &self->aio) < 0) {
        self->aio = 0; /* no AIO here (ENOSYS, a sandbox's EPERM, a full aio-max-nr): fsync(2) one by one */
    }
    int error = pthread_create(&self->thread, NULL, worker_main, self);
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->running = 1;
    return (PyObject *)self;
}

static void
worker_join(FsyncWorker *self)
{
    if (!self->running) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->running = 0;
}

static PyObject *
worker_submit(FsyncWorker *self, PyObject *handles)
{
    PyObject *sequence = PySequence_Fast(handles, "submit() takes a sequence of descriptors");
    if (sequence == NULL) {
        return NULL;
    }
    if (!self->running) {
        Py_DECREF(sequence);
        PyErr_SetString(PyExc_ValueError, "the fsync worker is closed");
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(sequence);
    int *values = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(int));
    if (values == NULL) {
        Py_DECREF(sequence);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t index = 0; index < count; index++) {
        long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(sequence, index));
        if ((value == -1 && PyErr_Occurred()) || value < 0 || value > INT_MAX) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "%ld is not a file descriptor", value);
            }
            PyMem_Free(values);
            Py_DECREF(sequence);
            return NULL;
        }
        values[index] = (int)value;
    }
    Py_DECREF(sequence);
    int failed = 0;
    pthread_mutex_lock(&self->lock);
    for (Py_ssize_t index = 0; index < count && !failed; index++) {
        failed = int_list_append(&self->queued, values[index]);
    }
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    PyMem_Free(values);
    if (failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *
worker_completed(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t counter;
    if (read(self->eventfd, &counter, sizeof counter) < 0 && errno != EAGAIN) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    pthread_mutex_lock(&self->lock);
    IntList taken = self->completed;
    self->completed.items = NULL;
    self->completed.length = self->completed.capacity = 0;
    pthread_mutex_unlock(&self->lock);
    PyObject *results = PyList_New(0);
    for (Py_ssize_t index = 0; results != NULL && index < taken.length / 2; index++) {
        PyObject *pair = Py_BuildValue("(ii)", taken.items[2 * index], taken.items[2 * index + 1]);
        if (pair == NULL || PyList_Append(results, pair) < 0) {
            Py_XDECREF(pair);
            Py_CLEAR(results);
            break;
        }
        Py_DECREF(pair);
    }
    free(taken.items);
    struct io_event events[AIO_SLOTS];
    struct timespec no_wait = {0, 0};
    long got = AIO_SLOTS;
    while (results != NULL && self->aio && got == AIO_SLOTS) { /* the finished AIO fsyncs, without waiting */
        got = syscall(SYS_io_getevents, self->aio, 0, AIO_SLOTS, events, &no_wait);
        for (long index = 0; index < got; index++) {
            PyObject *pair = Py_BuildValue("(ii)", (int)events[index].data, (int)events[index].res);
            if (pair == NULL || PyList_Append(results, pair) < 0) {
                Py_XDECREF(pair);
                Py_CLEAR(results);
                break;
            }
            Py_DECREF(pair);
        }
    }
    return results;
}

static PyObject *
worker_fileno(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->eventfd);
}

static PyObject *
worker_uses_aio(FsyncWorker *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->aio != 0);
}

static PyGetSetDef worker_getset[] = {
    {"aio", (getter)worker_uses_aio, NULL, "Whether the thread submits its fsyncs through Linux AIO.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static void
worker_release(FsyncWorker *self)
{
    /* Stop the thread (once it synced what is queued), close the eventfd, release the AIO context. */
    worker_join(self);
    if (self->eventfd >= 0) {
        close(self->eventfd);
        self->eventfd = -1;
    }
    if (self->aio) {
        syscall(SYS_io_destroy, self->aio);
        self->aio = 0;
    }
}

static PyObject *
worker_close(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    worker_release(self);
    Py_RETURN_NONE;
}

static void
worker_dealloc(FsyncWorker *self)
{
    worker_release(self);
    free(self->queued.items);
    free(self->completed.items);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef worker_methods[] = {
    {"submit", (PyCFunction)worker_submit, METH_O, "Queue descriptors to fsync (the thread takes all queued at once)."},
    {"completed", (PyCFunction)worker_completed, METH_NOARGS,
     "Reset the eventfd; the (descriptor, 0 or -errno) pairs of the fsyncs finished since the last call."},
    {"fileno", (PyCFunction)worker_fileno, METH_NOARGS, "The eventfd that counts finished fsyncs."},
    {"close", (PyCFunction)worker_close, METH_NOARGS, "Sync what is queued, stop the thread, close the eventfd and the AIO context."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FsyncWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqbroker.durability._fsync_worker.FsyncWorker",
    .tp_doc = "FsyncWorker(*, aio=True): a thread that fsyncs queued descriptors without the interpreter lock "
              "(submitting Linux AIO fsyncs where it can), counting finished fsyncs on an eventfd.",
    .tp_basicsize = sizeof(FsyncWorker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = worker_new,
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_methods = worker_methods,
    .tp_getset = worker_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fsync_worker",
    "fsync on a thread that never takes the interpreter lock (the reference: sync_engines.ThreadSync).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__fsync_worker(void)
{
    if (PyType_Ready(&FsyncWorkerType) < 0) {
        return NULL;
    }
    PyObject *created = PyModule_Create(&module);
    if (created == NULL) {
        return NULL;
    }
    Py_INCREF(&FsyncWorkerType);
    if (PyModule_AddObject(created, "FsyncWorker", (PyObject *)&FsyncWorkerType) < 0) {
        Py_DECREF(&FsyncWorkerType);
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
