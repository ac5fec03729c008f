/* fsync on a thread that never takes the interpreter lock; completions through an eventfd.
 *
 * The ``worker`` fsync engine (mqbroker/durability/sync_engines.py, ``WorkerSync``) hands a round's
 * descriptors to ``FsyncWorker.submit``; the worker thread fsyncs them one by one, appends
 * ``(descriptor, 0 or -errno)`` to the completed list and adds 1 to the eventfd, which the reactor
 * watches like a socket and drains with ``completed()``. Unlike Linux AIO, the fsync runs on a
 * thread of the broker the scheduler may place on an idle CPU (AIO's kernel worker is bound to the
 * submitting CPU and takes it from the reactor), and unlike a Python thread nothing waits for the
 * interpreter lock between the fsync and the reactor hearing of it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

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

static void *
worker_main(void *argument)
{
    FsyncWorker *self = argument;
    IntList batch = {NULL, 0, 0};
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
        for (Py_ssize_t index = 0; index < batch.length; index++) {
            int handle = batch.items[index];
            int result = fsync(handle) == 0 ? 0 : -errno;
            pthread_mutex_lock(&self->lock);
            int failed = int_list_append(&self->completed, handle) || int_list_append(&self->completed, result);
            pthread_mutex_unlock(&self->lock);
            if (failed) {
                abort(); /* out of memory for a few ints: the durability bookkeeping cannot go on */
            }
            uint64_t one = 1;
            while (write(self->eventfd, &one, sizeof one) < 0 && errno == EINTR) {
            }
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
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":FsyncWorker", keywords)) {
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
    PyObject *results = PyList_New(taken.length / 2);
    for (Py_ssize_t index = 0; results != NULL && index < taken.length / 2; index++) {
        PyObject *pair = Py_BuildValue("(ii)", taken.items[2 * index], taken.items[2 * index + 1]);
        if (pair == NULL) {
            Py_CLEAR(results);
            break;
        }
        PyList_SET_ITEM(results, index, pair);
    }
    free(taken.items);
    return results;
}

static PyObject *
worker_fileno(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->eventfd);
}

static PyObject *
worker_close(FsyncWorker *self, PyObject *Py_UNUSED(ignored))
{
    worker_join(self);
    if (self->eventfd >= 0) {
        close(self->eventfd);
        self->eventfd = -1;
    }
    Py_RETURN_NONE;
}

static void
worker_dealloc(FsyncWorker *self)
{
    worker_join(self);
    if (self->eventfd >= 0) {
        close(self->eventfd);
    }
    free(self->queued.items);
    free(self->completed.items);
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef worker_methods[] = {
    {"submit", (PyCFunction)worker_submit, METH_O, "Queue descriptors to fsync, in order."},
    {"completed", (PyCFunction)worker_completed, METH_NOARGS,
     "Reset the eventfd; the (descriptor, 0 or -errno) pairs synced since the last call."},
    {"fileno", (PyCFunction)worker_fileno, METH_NOARGS, "The eventfd that counts finished fsyncs."},
    {"close", (PyCFunction)worker_close, METH_NOARGS, "Sync what is queued, stop the thread, close the eventfd."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FsyncWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqbroker.durability._fsync_worker.FsyncWorker",
    .tp_doc = "A thread that fsyncs queued descriptors without the interpreter lock, counting them on an eventfd.",
    .tp_basicsize = sizeof(FsyncWorker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = worker_new,
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_methods = worker_methods,
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
