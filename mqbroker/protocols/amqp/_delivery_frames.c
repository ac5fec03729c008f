/* basic.deliver frames of many stored messages at once, in C: mqbroker.protocols.amqp._delivery_frames.
 *
 * A port of delivery_frames.encode_deliveries_python (the reference): the same arguments, the same bytes, and the
 * same ValueError for an exchange or routing key longer than a shortstr. Each row is a tuple (offset, key, value,
 * headers, ...) as mqbroker.records.decoder.decode_rows gives it; its exchange, routing key and property list are
 * the raw values of the record headers stored.append_message writes. A first pass finds every message's parts
 * (pointers into the rows' bytes, kept alive by a tuple of the rows), a second writes all frames into one bytes
 * object. tests/unit/protocols/amqp/test_delivery_frames.py checks it against the reference with hypothesis.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *default_layout; /* stored.STORED_LAYOUT */

#define FRAME_METHOD 1
#define FRAME_HEADER 2
#define FRAME_BODY 3
#define FRAME_END 0xCE
#define FRAME_OVERHEAD 8 /* type, channel, size; frame-end */
#define BASIC_CLASS 60
#define BASIC_DELIVER 60

typedef struct {
    const char *exchange, *routing_key, *properties, *body;
    Py_ssize_t exchange_size, routing_key_size, properties_size, body_size;
    int redelivered;
} Parts;

/* `value or b""`: the bytes of a header value or key (None or empty: none). */
static int bytes_of(PyObject *value, const char **data, Py_ssize_t *size) {
    if (value == Py_None) {
        *data = "";
        *size = 0;
        return 0;
    }
    if (!PyBytes_Check(value)) {
        PyErr_Format(PyExc_TypeError, "encode_deliveries: a record field is %.100s, not bytes or None",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(value);
    *size = PyBytes_GET_SIZE(value);
    return 0;
}

/* fields.shortstr_bytes's check: at most 255 bytes, else its ValueError. */
static int check_shortstr(const char *data, Py_ssize_t size) {
    if (size <= 255) return 0;
    PyObject *head = PyBytes_FromStringAndSize(data, 40);
    if (head == NULL) return -1;
    PyErr_Format(PyExc_ValueError, "short string of %zd bytes exceeds 255: %R...", size, head);
    Py_DECREF(head);
    return -1;
}

/* A header's name equals `name` (as Python's == says); -1 on error. */
static int named(PyObject *header, PyObject *name) {
    return PyObject_RichCompareBool(PyTuple_GET_ITEM(header, 0), name, Py_EQ);
}

/* delivery_fields: a row's exchange, routing key, property list and body. */
static int row_parts(PyObject *row, PyObject *layout, Parts *parts) {
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 4 || !PyTuple_Check(PyTuple_GET_ITEM(row, 3))) {
        PyErr_SetString(PyExc_TypeError, "encode_deliveries: a row is not a tuple (offset, key, value, headers, ...)");
        return -1;
    }
    PyObject *headers = PyTuple_GET_ITEM(row, 3);
    Py_ssize_t count = PyTuple_GET_SIZE(headers);
    for (Py_ssize_t index = 0; index < count; index++) {
        PyObject *header = PyTuple_GET_ITEM(headers, index);
        if (!PyTuple_Check(header) || PyTuple_GET_SIZE(header) != 2) {
            PyErr_SetString(PyExc_TypeError, "encode_deliveries: a record header is not a (name, value) tuple");
            return -1;
        }
    }
    PyObject *exchange = Py_None, *routing_key = Py_None, *properties = Py_None;
    int canonical = count >= 3;
    for (Py_ssize_t index = 0; canonical && index < 3; index++) {
        int equal = named(PyTuple_GET_ITEM(headers, index), PyTuple_GET_ITEM(layout, index));
        if (equal < 0) return -1;
        canonical = equal;
    }
    if (canonical) {
        exchange = PyTuple_GET_ITEM(PyTuple_GET_ITEM(headers, 0), 1);
        routing_key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(headers, 1), 1);
        properties = PyTuple_GET_ITEM(PyTuple_GET_ITEM(headers, 2), 1);
    } else { /* dict(headers): the last header of each name counts; the routing key defaults to the record key */
        routing_key = PyTuple_GET_ITEM(row, 1);
        for (Py_ssize_t index = 0; index < count; index++) {
            PyObject *header = PyTuple_GET_ITEM(headers, index);
            PyObject **slots[3] = {&exchange, &routing_key, &properties};
            for (int which = 0; which < 3; which++) {
                int equal = named(header, PyTuple_GET_ITEM(layout, which));
                if (equal < 0) return -1;
                if (equal) *slots[which] = PyTuple_GET_ITEM(header, 1);
            }
        }
    }
    if (bytes_of(exchange, &parts->exchange, &parts->exchange_size) < 0 ||
        bytes_of(routing_key, &parts->routing_key, &parts->routing_key_size) < 0 ||
        bytes_of(properties, &parts->properties, &parts->properties_size) < 0 ||
        bytes_of(PyTuple_GET_ITEM(row, 2), &parts->body, &parts->body_size) < 0)
        return -1;
    if (parts->properties_size == 0) { /* `or empty_properties` */
        PyObject *empty = PyTuple_GET_ITEM(layout, 3);
        parts->properties = PyBytes_AS_STRING(empty);
        parts->properties_size = PyBytes_GET_SIZE(empty);
    }
    if (check_shortstr(parts->exchange, parts->exchange_size) < 0 ||
        check_shortstr(parts->routing_key, parts->routing_key_size) < 0)
        return -1;
    return 0;
}

static inline unsigned char *put16(unsigned char *out, uint16_t value) {
    out[0] = (unsigned char)(value >> 8);
    out[1] = (unsigned char)value;
    return out + 2;
}

static inline unsigned char *put32(unsigned char *out, uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) *out++ = (unsigned char)(value >> shift);
    return out;
}

static inline unsigned char *put64(unsigned char *out, uint64_t value) {
    for (int shift = 56; shift >= 0; shift -= 8) *out++ = (unsigned char)(value >> shift);
    return out;
}

static inline unsigned char *put_bytes(unsigned char *out, const char *data, Py_ssize_t size) {
    memcpy(out, data, (size_t)size);
    return out + size;
}

static inline unsigned char *frame_head(unsigned char *out, int type, uint16_t channel, Py_ssize_t size) {
    *out++ = (unsigned char)type;
    out = put16(out, channel);
    return put32(out, (uint32_t)size);
}

static Py_ssize_t method_payload_size(const Parts *parts, Py_ssize_t consumer_tag_size) {
    return 4 + consumer_tag_size + 8 + 1 + 1 + parts->exchange_size + 1 + parts->routing_key_size;
}

static Py_ssize_t body_frames(Py_ssize_t body_size, Py_ssize_t chunk) {
    return body_size == 0 ? 0 : (body_size + chunk - 1) / chunk;
}

static Py_ssize_t message_size(const Parts *parts, Py_ssize_t consumer_tag_size, Py_ssize_t chunk) {
    return FRAME_OVERHEAD + method_payload_size(parts, consumer_tag_size) + FRAME_OVERHEAD + 12 +
           parts->properties_size + parts->body_size + FRAME_OVERHEAD * body_frames(parts->body_size, chunk);
}

static unsigned char *write_message(unsigned char *out, const Parts *parts, uint16_t channel, const char *consumer_tag,
                                    Py_ssize_t consumer_tag_size, uint64_t delivery_tag, Py_ssize_t chunk) {
    out = frame_head(out, FRAME_METHOD, channel, method_payload_size(parts, consumer_tag_size));
    out = put16(out, BASIC_CLASS);
    out = put16(out, BASIC_DELIVER);
    out = put_bytes(out, consumer_tag, consumer_tag_size);
    out = put64(out, delivery_tag);
    *out++ = (unsigned char)(parts->redelivered ? 1 : 0);
    *out++ = (unsigned char)parts->exchange_size;
    out = put_bytes(out, parts->exchange, parts->exchange_size);
    *out++ = (unsigned char)parts->routing_key_size;
    out = put_bytes(out, parts->routing_key, parts->routing_key_size);
    *out++ = FRAME_END;
    out = frame_head(out, FRAME_HEADER, channel, 12 + parts->properties_size);
    out = put16(out, BASIC_CLASS);
    out = put16(out, 0); /* weight */
    out = put64(out, (uint64_t)parts->body_size);
    out = put_bytes(out, parts->properties, parts->properties_size);
    *out++ = FRAME_END;
    for (Py_ssize_t start = 0; start < parts->body_size; start += chunk) {
        Py_ssize_t size = parts->body_size - start < chunk ? parts->body_size - start : chunk;
        out = frame_head(out, FRAME_BODY, channel, size);
        out = put_bytes(out, parts->body + start, size);
        *out++ = FRAME_END;
    }
    return out;
}

PyDoc_STRVAR(encode_deliveries_doc,
"encode_deliveries(rows, redelivered, channel, consumer_tag, first_delivery_tag, frame_max, layout=STORED_LAYOUT)\n"
"--\n\n"
"basic.deliver frames of record rows, as delivery_frames.encode_deliveries_python gives them.");

static PyObject *encode_deliveries(PyObject *module, PyObject *const *arguments, Py_ssize_t count) {
    (void)module;
    if (count != 6 && count != 7) {
        PyErr_Format(PyExc_TypeError, "encode_deliveries takes 6 or 7 arguments (%zd given)", count);
        return NULL;
    }
    PyObject *layout = count == 7 ? arguments[6] : default_layout;
    if (!PyTuple_Check(layout) || PyTuple_GET_SIZE(layout) != 4 || !PyBytes_Check(PyTuple_GET_ITEM(layout, 3))) {
        PyErr_SetString(PyExc_TypeError, "encode_deliveries: layout must be (str, str, str, bytes)");
        return NULL;
    }
    PyObject *redelivered = arguments[1];
    if (!PyBytes_Check(arguments[3])) {
        PyErr_SetString(PyExc_TypeError, "encode_deliveries: consumer_tag must be bytes (an encoded shortstr)");
        return NULL;
    }
    long channel = PyLong_AsLong(arguments[2]);
    if (channel == -1 && PyErr_Occurred()) return NULL;
    unsigned long long first_delivery_tag = PyLong_AsUnsignedLongLong(arguments[4]);
    if (first_delivery_tag == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t frame_max = PyLong_AsSsize_t(arguments[5]);
    if (frame_max == -1 && PyErr_Occurred()) return NULL;
    if (channel < 0 || channel > 0xFFFF || frame_max <= FRAME_OVERHEAD) {
        PyErr_SetString(PyExc_ValueError, "encode_deliveries: channel or frame_max out of range");
        return NULL;
    }
    /* A tuple of the rows holds them (and so every bytes object Parts points into) whatever runs meanwhile. */
    PyObject *rows = PySequence_Tuple(arguments[0]);
    if (rows == NULL) return NULL;
    Py_ssize_t row_count = PyTuple_GET_SIZE(rows);
    Parts *parts = PyMem_Malloc(sizeof(Parts) * (size_t)(row_count ? row_count : 1));
    PyObject *encoded = NULL;
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int check_redelivered = !(PyAnySet_Check(redelivered) && PySet_GET_SIZE(redelivered) == 0);
    const char *consumer_tag = PyBytes_AS_STRING(arguments[3]);
    Py_ssize_t consumer_tag_size = PyBytes_GET_SIZE(arguments[3]);
    Py_ssize_t chunk = frame_max - FRAME_OVERHEAD;
    Py_ssize_t total = 0;
    for (Py_ssize_t index = 0; index < row_count; index++) {
        PyObject *row = PyTuple_GET_ITEM(rows, index);
        if (row_parts(row, layout, &parts[index]) < 0) goto done;
        parts[index].redelivered = 0;
        if (check_redelivered) {
            int found = PySequence_Contains(redelivered, PyTuple_GET_ITEM(row, 0));
            if (found < 0) goto done;
            parts[index].redelivered = found;
        }
        total += message_size(&parts[index], consumer_tag_size, chunk);
    }
    encoded = PyBytes_FromStringAndSize(NULL, total);
    if (encoded == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(encoded);
    for (Py_ssize_t index = 0; index < row_count; index++)
        out = write_message(out, &parts[index], (uint16_t)channel, consumer_tag, consumer_tag_size,
                            (uint64_t)first_delivery_tag + (uint64_t)index, chunk);
    assert(out == (unsigned char *)PyBytes_AS_STRING(encoded) + total);
done:
    PyMem_Free(parts);
    Py_DECREF(rows);
    if (PyErr_Occurred()) Py_CLEAR(encoded);
    return encoded;
}

static PyMethodDef methods[] = {
    {"encode_deliveries", (PyCFunction)(void (*)(void))encode_deliveries, METH_FASTCALL, encode_deliveries_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
    (void)module;
    if (default_layout != NULL) return 0;
    PyObject *stored = PyImport_ImportModule("mqbroker.protocols.amqp.stored");
    if (stored == NULL) return -1;
    default_layout = PyObject_GetAttrString(stored, "STORED_LAYOUT");
    Py_DECREF(stored);
    return default_layout == NULL ? -1 : 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mqbroker.protocols.amqp._delivery_frames",
    .m_doc = "basic.deliver frames of stored messages encoded in C (see mqbroker.protocols.amqp.delivery_frames).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__delivery_frames(void) { return PyModuleDef_Init(&module_definition); }
