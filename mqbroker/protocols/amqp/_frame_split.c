/* The whole frames at the head of received AMQP bytes, in C: mqbroker.protocols.amqp._frame_split.
 *
 * A port of frame_split.split_frames_python (the reference): the same arguments and the same items, a plain frame
 * as (type, channel, payload) and a basic.publish with its content header and whole body, with the messages alike
 * right after it, as (channel, method payload, content-header payload, [body, ...]). It stops before an incomplete frame, one larger than frame_bytes_max and
 * one whose frame-end octet is wrong; the decoder judges those. tests/unit/protocols/amqp/test_frame_split.py checks
 * it against the reference with hypothesis.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_METHOD 1
#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define FRAME_HEAD 7     /* type, channel, size */
#define FRAME_OVERHEAD 8 /* the head and the frame-end octet */
#define CONTENT_HEADER 12 /* class, weight, body size */
#define BASIC_CLASS 60
#define BASIC_PUBLISH 40

typedef struct {
    int type;
    unsigned channel;
    Py_ssize_t start, end; /* the payload is data[start:end]; data[end] is the frame-end octet */
} Found;

static inline uint32_t get32(const unsigned char *in) {
    return ((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) | in[3];
}

static inline uint64_t get64(const unsigned char *in) {
    return ((uint64_t)get32(in) << 32) | get32(in + 4);
}

/* _frame_at: the well-formed whole frame at `position`, or 0. */
static int frame_at(const unsigned char *data, Py_ssize_t length, Py_ssize_t position, long long frame_bytes_max,
                    Found *found) {
    if (length - position < FRAME_HEAD) return 0;
    uint32_t size = get32(data + position + 3);
    if ((long long)size + FRAME_OVERHEAD > frame_bytes_max) return 0;
    Py_ssize_t end = position + FRAME_HEAD + (Py_ssize_t)size;
    if (length <= end || data[end] != FRAME_END) return 0;
    found->type = data[position];
    found->channel = ((unsigned)data[position + 1] << 8) | data[position + 2];
    found->start = position + FRAME_HEAD;
    found->end = end;
    return 1;
}

static inline PyObject *bytes_of(const unsigned char *data, Py_ssize_t start, Py_ssize_t end) {
    return PyBytes_FromStringAndSize((const char *)data + start, end - start);
}

/* Where a published message's parts lie: payloads data[start:end] of its method, content header and body. */
typedef struct {
    unsigned channel;
    Py_ssize_t method_start, method_end, header_start, header_end, body_start, body_end, next;
} Message;

/* _publish_at: whether the basic.publish frame `method` is followed by its whole content (then *message says where
 * its parts are and where its frames end). */
static int publish_at(const unsigned char *data, Py_ssize_t length, const Found *method, long long frame_bytes_max,
                      Message *message) {
    if (method->end - method->start < 4 || get32(data + method->start) != ((BASIC_CLASS << 16) | BASIC_PUBLISH))
        return 0;
    Found header, body;
    if (!frame_at(data, length, method->end + 1, frame_bytes_max, &header) || header.type != FRAME_HEADER ||
        header.channel != method->channel || header.end - header.start < CONTENT_HEADER)
        return 0;
    const unsigned char *content = data + header.start;
    if ((((unsigned)content[0] << 8) | content[1]) != BASIC_CLASS) return 0;
    uint64_t body_size = get64(content + 4);
    message->channel = method->channel;
    message->method_start = method->start;
    message->method_end = method->end;
    message->header_start = header.start;
    message->header_end = header.end;
    if (body_size != 0) {
        if (!frame_at(data, length, header.end + 1, frame_bytes_max, &body) || body.type != FRAME_BODY ||
            body.channel != method->channel || (uint64_t)(body.end - body.start) != body_size)
            return 0;
        message->body_start = body.start;
        message->body_end = body.end;
        message->next = body.end + 1;
    } else {
        message->body_start = message->body_end = 0;
        message->next = header.end + 1;
    }
    return 1;
}

static inline int same_part(const unsigned char *data, Py_ssize_t start, Py_ssize_t end, Py_ssize_t other_start,
                            Py_ssize_t other_end) {
    return end - start == other_end - other_start && memcmp(data + start, data + other_start, end - start) == 0;
}

/* The message right after `first` if it is on its channel with the same method and content header
 * (*next is left alone otherwise). */
static int alike_after(const unsigned char *data, Py_ssize_t length, const Message *first, Py_ssize_t position,
                       long long frame_bytes_max, Message *next) {
    Found method;
    Message found;
    if (frame_at(data, length, position, frame_bytes_max, &method) && method.type == FRAME_METHOD &&
        method.channel == first->channel && publish_at(data, length, &method, frame_bytes_max, &found) &&
        same_part(data, first->method_start, first->method_end, found.method_start, found.method_end) &&
        same_part(data, first->header_start, first->header_end, found.header_start, found.header_end)) {
        *next = found;
        return 1;
    }
    return 0;
}

/* The item of a published message and of the alike messages right after it (their bodies in one list); *next is
 * where their frames end. NULL on error. */
static PyObject *publish_item(const unsigned char *data, Py_ssize_t length, const Message *first,
                              long long frame_bytes_max, Py_ssize_t *next) {
    PyObject *bodies = PyList_New(0);
    if (bodies == NULL) return NULL;
    Message message = *first;
    for (;;) {
        PyObject *body = bytes_of(data, message.body_start, message.body_end);
        if (body == NULL || PyList_Append(bodies, body) < 0) {
            Py_XDECREF(body);
            Py_DECREF(bodies);
            return NULL;
        }
        Py_DECREF(body);
        if (!alike_after(data, length, first, message.next, frame_bytes_max, &message)) break;
    }
    *next = message.next;
    return Py_BuildValue("(IN N N)", first->channel, bytes_of(data, first->method_start, first->method_end),
                         bytes_of(data, first->header_start, first->header_end), bodies);
}

PyDoc_STRVAR(split_frames_doc,
"split_frames(buffer, frame_bytes_max)\n"
"--\n\n"
"The well-formed whole frames at the head of buffer and the bytes they take, as\n"
"frame_split.split_frames_python gives them.");

static PyObject *split_frames(PyObject *module, PyObject *const *arguments, Py_ssize_t count) {
    (void)module;
    if (count != 2) {
        PyErr_Format(PyExc_TypeError, "split_frames takes 2 arguments (%zd given)", count);
        return NULL;
    }
    long long frame_bytes_max = PyLong_AsLongLong(arguments[1]);
    if (frame_bytes_max == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arguments[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t length = view.len, position = 0;
    PyObject *items = PyList_New(0);
    if (items == NULL) goto failed;
    Found found;
    while (frame_at(data, length, position, frame_bytes_max, &found)) {
        PyObject *item = NULL;
        Message message;
        if (found.type == FRAME_METHOD && publish_at(data, length, &found, frame_bytes_max, &message)) {
            item = publish_item(data, length, &message, frame_bytes_max, &position);
            if (item == NULL) goto failed;
        } else {
            item = Py_BuildValue("(iIN)", found.type, found.channel, bytes_of(data, found.start, found.end));
            if (item == NULL) goto failed;
            position = found.end + 1;
        }
        int appended = PyList_Append(items, item);
        Py_DECREF(item);
        if (appended < 0) goto failed;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", items, position);
failed:
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split_frames", (PyCFunction)(void (*)(void))split_frames, METH_FASTCALL, split_frames_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
    {0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mqbroker.protocols.amqp._frame_split",
    .m_doc = "The whole frames at the head of received AMQP bytes (reference: frame_split.split_frames_python).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__frame_split(void) { return PyModuleDef_Init(&module_definition); }
