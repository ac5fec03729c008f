/* A producer batch's records encoded in C as they are sent: mqbroker.client._batch_records.BatchRecords.
 *
 * A port of what a producer batch uses of mqbroker.records.builder.BatchBuilder, with the bounded append of
 * the producer core: batch_records.BatchRecordsPython is the reference (BatchBuilder itself plus that append).
 * The same calls give the same results and the same batch bytes, which tests/unit/client/test_batch_records.py
 * checks with hypothesis. `append_within` is one C call per record (the reference makes five Python calls), and
 * the records go into one growing buffer rather than a bytes object each. An append that raises leaves the
 * batch as it was. Built by setup.py (ext_modules); without a compiler the reference is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include "structmember.h"
#include <string.h>

#define HEADER_BYTES 61
#define LOG_OVERHEAD_BYTES 12
#define CRC_START 21
#define MAGIC 2
#define TRANSACTIONAL_MASK 0x10
#define NO_PARTITION_LEADER_EPOCH (-1)
#define NO_TIMESTAMP (-1)
/* builder.RECORD_OVERHEAD_BYTES_MAX, and what batch_records.encoded_size_max adds per header beyond its bytes. */
#define RECORD_OVERHEAD_BYTES_MAX 36
#define HEADER_OVERHEAD_BYTES_MAX 10
#define VARINT_BYTES_MAX 10
#define INT32_MAX_VALUE 2147483647LL

static PyObject *compression_type;  /* mqbroker.records.compression.Compression */
static PyObject *compress_function; /* mqbroker.records.compression.compress */
static PyObject *crc32c_function;   /* crc32c.crc32c */

typedef struct {
    PyObject_HEAD
    char *records; /* the records section, uncompressed */
    Py_ssize_t used;
    Py_ssize_t capacity;
    int64_t records_count;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int producer_epoch;
    int32_t base_sequence;
    int attributes;
    PyObject *compression; /* a Compression member */
} BatchRecords;

/* varint.encode_varint: zig-zag, then 7-bit groups, low first. */
static inline uint64_t zigzag(int64_t value) { return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); }

static inline Py_ssize_t varint_size(int64_t value) {
    uint64_t unsigned_value = zigzag(value);
    Py_ssize_t size = 1;
    while (unsigned_value >= 0x80) {
        unsigned_value >>= 7;
        size++;
    }
    return size;
}

static inline char *write_varint(char *out, int64_t value) {
    uint64_t unsigned_value = zigzag(value);
    while (unsigned_value >= 0x80) {
        *out++ = (char)((unsigned_value & 0x7F) | 0x80);
        unsigned_value >>= 7;
    }
    *out++ = (char)unsigned_value;
    return out;
}

/* A key or value: None (null, length -1) or a bytes-like object (bytes read directly, others through a buffer). */
typedef struct {
    const char *data;
    Py_ssize_t length;
    int is_null;
    int has_view;
    Py_buffer view;
} Field;

static int field_open(PyObject *object, Field *field, const char *name) {
    field->is_null = object == Py_None;
    field->has_view = 0;
    field->length = 0;
    if (field->is_null) return 0;
    if (PyBytes_CheckExact(object)) {
        field->data = PyBytes_AS_STRING(object);
        field->length = PyBytes_GET_SIZE(object);
        return 0;
    }
    if (PyObject_GetBuffer(object, &field->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a record's %s must be bytes or None, not %.100s", name, Py_TYPE(object)->tp_name);
        return -1;
    }
    field->has_view = 1;
    field->data = field->view.buf;
    field->length = field->view.len;
    return 0;
}

static void field_close(Field *field) {
    if (field->has_view) PyBuffer_Release(&field->view);
}

/* The field's varint length (-1 for null) and its bytes. */
static inline Py_ssize_t field_encoded_size(const Field *field) {
    return field->is_null ? 1 : varint_size(field->length) + field->length;
}

static inline char *write_field(char *out, const Field *field) {
    if (field->is_null) return write_varint(out, -1);
    out = write_varint(out, field->length);
    memcpy(out, field->data, (size_t)field->length);
    return out + field->length;
}

/* builder._encode_headers into a new buffer (*section, *size; free with PyMem_Free), and what
   batch_records.encoded_size_max counts for them (*bound). An empty or missing header list is the count 0. */
static int encode_headers(PyObject *headers, char **section, Py_ssize_t *size, Py_ssize_t *bound) {
    *section = NULL;
    *size = 1;
    *bound = 0;
    if (headers == Py_None) return 0;
    PyObject *items = PySequence_Fast(headers, "a record's headers must be a sequence of (str, bytes or None)");
    if (items == NULL) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    if (count == 0) {
        Py_DECREF(items);
        return 0;
    }
    Py_ssize_t capacity = VARINT_BYTES_MAX, used = 0;
    char *buffer = PyMem_Malloc((size_t)capacity);
    if (buffer == NULL) goto no_memory;
    used = write_varint(buffer, count) - buffer;
    for (Py_ssize_t index = 0; index < count; index++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(items, index); /* (no Python code runs until it is read) */
        if ((!PyTuple_Check(pair) && !PyList_Check(pair)) || PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a record header must be a (str, bytes or None) pair");
            goto error;
        }
        PyObject *header_key = PySequence_Fast_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(header_key)) {
            PyErr_Format(PyExc_TypeError, "a record header's key must be a str, not %.100s",
                         Py_TYPE(header_key)->tp_name);
            goto error;
        }
        Py_ssize_t key_size;
        const char *key_bytes = PyUnicode_AsUTF8AndSize(header_key, &key_size);
        Field value;
        if (key_bytes == NULL || field_open(PySequence_Fast_GET_ITEM(pair, 1), &value, "header value") < 0) goto error;
        Py_ssize_t needed = used + VARINT_BYTES_MAX + key_size + field_encoded_size(&value);
        if (needed > capacity) {
            capacity = needed * 2;
            char *grown = PyMem_Realloc(buffer, (size_t)capacity);
            if (grown == NULL) {
                field_close(&value);
                goto no_memory;
            }
            buffer = grown;
        }
        char *out = write_varint(buffer + used, key_size);
        memcpy(out, key_bytes, (size_t)key_size);
        out = write_field(out + key_size, &value);
        used = out - buffer;
        *bound += HEADER_OVERHEAD_BYTES_MAX + key_size + value.length;
        field_close(&value);
    }
    Py_DECREF(items);
    *section = buffer;
    *size = used;
    return 0;
no_memory:
    PyErr_NoMemory();
error:
    PyMem_Free(buffer);
    Py_DECREF(items);
    return -1;
}

static int reserve(BatchRecords *self, Py_ssize_t more) {
    if (self->used + more <= self->capacity) return 0;
    Py_ssize_t capacity = self->capacity ? self->capacity : 4096;
    while (capacity < self->used + more) capacity *= 2;
    char *grown = PyMem_Realloc(self->records, (size_t)capacity);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->records = grown;
    self->capacity = capacity;
    return 0;
}

/* The timestamp delta of a record at `timestamp_ms` (the first record sets the base timestamp). */
static int timestamp_delta(const BatchRecords *self, int64_t timestamp_ms, int64_t *delta) {
    if (self->records_count == 0) {
        *delta = 0;
        return 0;
    }
    if (__builtin_sub_overflow(timestamp_ms, self->base_timestamp, delta)) {
        PyErr_SetString(PyExc_OverflowError, "a record's timestamp is too far from its batch's first");
        return -1;
    }
    return 0;
}

/* One record at the next offset: its length varint, then attributes (0), timestamp delta, offset delta, key,
   value and the header section (builder._encode_record). Room for `record_size` bytes is reserved. */
static void write_record(BatchRecords *self, int64_t timestamp_ms, int64_t delta, Py_ssize_t body_size,
                         const Field *key, const Field *value, const char *headers, Py_ssize_t headers_size) {
    char *out = write_varint(self->records + self->used, body_size);
    *out++ = 0;
    out = write_varint(out, delta);
    out = write_varint(out, self->records_count);
    out = write_field(out, key);
    out = write_field(out, value);
    if (headers == NULL) {
        *out++ = 0; /* no headers: the count 0 */
    } else {
        memcpy(out, headers, (size_t)headers_size);
        out += headers_size;
    }
    self->used = out - self->records;
    if (self->records_count == 0) self->base_timestamp = timestamp_ms;
    if (timestamp_ms > self->max_timestamp) self->max_timestamp = timestamp_ms;
    self->records_count++;
}

static int int64_argument(PyObject *object, const char *name, int64_t *out) {
    if (!PyLong_Check(object)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(object)->tp_name);
        return -1;
    }
    long long value = PyLong_AsLongLong(object);
    if (value == -1 && PyErr_Occurred()) return -1;
    *out = value;
    return 0;
}

PyDoc_STRVAR(append_within_doc,
"append_within(timestamp_ms, key, value, headers, size_bytes_max)\n"
"--\n\n"
"Add a record at the next offset and return its index, unless the batch holds records already and\n"
"size_bytes plus encoded_size_max(key, value, headers) would pass size_bytes_max: then add nothing, return -1.");

static PyObject *append_within(BatchRecords *self, PyObject *const *arguments, Py_ssize_t count) {
    if (count != 5) {
        PyErr_Format(PyExc_TypeError, "append_within takes 5 arguments (%zd given)", count);
        return NULL;
    }
    int64_t timestamp_ms, size_bytes_max, delta;
    if (int64_argument(arguments[0], "timestamp_ms", &timestamp_ms) < 0 ||
        int64_argument(arguments[4], "size_bytes_max", &size_bytes_max) < 0)
        return NULL;
    Field key, value;
    if (field_open(arguments[1], &key, "key") < 0) return NULL;
    if (field_open(arguments[2], &value, "value") < 0) {
        field_close(&key);
        return NULL;
    }
    char *headers = NULL;
    Py_ssize_t headers_size, headers_bound;
    PyObject *result = NULL;
    if (encode_headers(arguments[3], &headers, &headers_size, &headers_bound) < 0) goto done;
    int64_t index = self->records_count;
    if (index > 0 && HEADER_BYTES + self->used + RECORD_OVERHEAD_BYTES_MAX + key.length +
                             value.length + headers_bound > size_bytes_max) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (index == INT32_MAX_VALUE) { /* the last offset delta a batch can hold */
        PyErr_SetString(PyExc_OverflowError, "a batch holds at most 2**31 - 1 records");
        goto done;
    }
    if (timestamp_delta(self, timestamp_ms, &delta) < 0) goto done;
    Py_ssize_t body_size = 1 + varint_size(delta) + varint_size(index) + field_encoded_size(&key) +
                           field_encoded_size(&value) + headers_size;
    if (reserve(self, varint_size(body_size) + body_size) < 0) goto done;
    write_record(self, timestamp_ms, delta, body_size, &key, &value, headers, headers_size);
    result = PyLong_FromLongLong(index);
done:
    PyMem_Free(headers);
    field_close(&key);
    field_close(&value);
    return result;
}

PyDoc_STRVAR(append_values_doc,
"append_values(timestamp_ms, values, start, size_bytes_max)\n"
"--\n\n"
"Add keyless, headerless records holding values[start:], as many as keep the batch within size_bytes_max\n"
"(at least one if it is empty); return how many were added (BatchBuilder.append_values).");

static PyObject *append_values(BatchRecords *self, PyObject *const *arguments, Py_ssize_t count) {
    if (count != 4) {
        PyErr_Format(PyExc_TypeError, "append_values takes 4 arguments (%zd given)", count);
        return NULL;
    }
    int64_t timestamp_ms, start, size_bytes_max;
    if (int64_argument(arguments[0], "timestamp_ms", &timestamp_ms) < 0 ||
        int64_argument(arguments[2], "start", &start) < 0 ||
        int64_argument(arguments[3], "size_bytes_max", &size_bytes_max) < 0)
        return NULL;
    PyObject *values = PySequence_Fast(arguments[1], "values must be a sequence of bytes");
    if (values == NULL) return NULL;
    /* restored if a value is refused: the call adds all it can or nothing */
    Py_ssize_t used = self->used;
    int64_t records_count = self->records_count, base_timestamp = self->base_timestamp;
    int64_t max_timestamp = self->max_timestamp;
    Py_ssize_t total = PySequence_Fast_GET_SIZE(values);
    Py_ssize_t position = start < 0 ? 0 : (Py_ssize_t)start;
    Field null_key = {.is_null = 1, .length = 0};
    for (; position < total; position++) {
        Field value;
        int64_t delta;
        if (field_open(PySequence_Fast_GET_ITEM(values, position), &value, "value") < 0) goto error;
        if (value.is_null) {
            PyErr_SetString(PyExc_TypeError, "append_values takes bytes values, not None");
            goto error;
        }
        if (timestamp_delta(self, timestamp_ms, &delta) < 0) {
            field_close(&value);
            goto error;
        }
        Py_ssize_t body_size = 1 + varint_size(delta) + varint_size(self->records_count) + 1 +
                               field_encoded_size(&value) + 1;
        Py_ssize_t record_size = varint_size(body_size) + body_size;
        if (self->records_count > 0 &&
            (HEADER_BYTES + self->used + record_size > size_bytes_max || self->records_count == INT32_MAX_VALUE)) {
            field_close(&value);
            break;
        }
        if (reserve(self, record_size) < 0) {
            field_close(&value);
            goto error;
        }
        write_record(self, timestamp_ms, delta, body_size, &null_key, &value, NULL, 1);
        field_close(&value);
    }
    Py_DECREF(values);
    return PyLong_FromLongLong(self->records_count - records_count);
error:
    self->used = used;
    self->records_count = records_count;
    self->base_timestamp = base_timestamp;
    self->max_timestamp = max_timestamp;
    Py_DECREF(values);
    return NULL;
}

static inline void put_int16(char *out, int value) {
    out[0] = (char)(value >> 8);
    out[1] = (char)value;
}

static inline void put_int32(char *out, int64_t value) {
    uint32_t bits = (uint32_t)value;
    for (int index = 3; index >= 0; index--, bits >>= 8) out[index] = (char)(bits & 0xFF);
}

static inline void put_int64(char *out, int64_t value) {
    uint64_t bits = (uint64_t)value;
    for (int index = 7; index >= 0; index--, bits >>= 8) out[index] = (char)(bits & 0xFF);
}

PyDoc_STRVAR(build_doc,
"build()\n"
"--\n\n"
"The finished batch: header, CRC-32C and the (compressed) records (BatchBuilder.build).");

static PyObject *build(BatchRecords *self, PyObject *Py_UNUSED(ignored)) {
    if (self->records_count == 0) {
        PyErr_SetString(PyExc_ValueError, "a producer batch is built with at least one record");
        return NULL;
    }
    PyObject *section = PyBytes_FromStringAndSize(self->records, self->used);
    if (section == NULL) return NULL;
    if (self->attributes & 0x07) {
        PyObject *compressed = PyObject_CallFunctionObjArgs(compress_function, self->compression, section, NULL);
        Py_DECREF(section);
        if (compressed == NULL) return NULL;
        if (!PyBytes_Check(compressed)) {
            PyErr_SetString(PyExc_TypeError, "compress() must return bytes");
            Py_DECREF(compressed);
            return NULL;
        }
        section = compressed;
    }
    Py_ssize_t section_size = PyBytes_GET_SIZE(section);
    PyObject *batch = PyBytes_FromStringAndSize(NULL, HEADER_BYTES + section_size);
    if (batch == NULL) {
        Py_DECREF(section);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(batch);
    put_int64(out, 0); /* base offset: the broker stamps it */
    put_int32(out + 8, HEADER_BYTES - LOG_OVERHEAD_BYTES + section_size);
    put_int32(out + 12, NO_PARTITION_LEADER_EPOCH);
    out[16] = MAGIC;
    put_int16(out + 21, self->attributes);
    put_int32(out + 23, self->records_count - 1);
    put_int64(out + 27, self->base_timestamp);
    put_int64(out + 35, self->max_timestamp);
    put_int64(out + 43, self->producer_id);
    put_int16(out + 51, self->producer_epoch);
    put_int32(out + 53, self->base_sequence);
    put_int32(out + 57, self->records_count);
    memcpy(out + HEADER_BYTES, PyBytes_AS_STRING(section), (size_t)section_size);
    Py_DECREF(section);
    PyObject *covered = PyMemoryView_FromMemory(out + CRC_START, HEADER_BYTES - CRC_START + section_size, PyBUF_READ);
    if (covered == NULL) goto error;
    PyObject *crc = PyObject_CallOneArg(crc32c_function, covered);
    Py_DECREF(covered);
    if (crc == NULL) goto error;
    unsigned long crc_value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (crc_value == (unsigned long)-1 && PyErr_Occurred()) goto error;
    put_int32(out + 17, (int64_t)crc_value);
    return batch;
error:
    Py_DECREF(batch);
    return NULL;
}

static PyObject *get_size_bytes(BatchRecords *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(HEADER_BYTES + self->used);
}

static PyObject *get_records_count(BatchRecords *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->records_count);
}

static int init(BatchRecords *self, PyObject *positional, PyObject *keywords) {
    static char *names[] = {"compression", "producer_id", "producer_epoch", "base_sequence", "is_transactional", NULL};
    PyObject *compression = NULL;
    long long producer_id = -1, base_sequence = -1;
    int producer_epoch = -1, is_transactional = 0;
    if (!PyArg_ParseTupleAndKeywords(positional, keywords, "|$OLiLp:BatchRecords", names, &compression,
                                     &producer_id, &producer_epoch, &base_sequence, &is_transactional))
        return -1;
    if (producer_epoch < -32768 || producer_epoch > 32767 || base_sequence < -2147483648LL ||
        base_sequence > INT32_MAX_VALUE) {
        PyErr_SetString(PyExc_OverflowError, "producer_epoch must fit 16 bits and base_sequence 32");
        return -1;
    }
    PyObject *member; /* a Compression member as it is (calling the Enum class runs Python code) */
    if (compression != NULL && PyObject_TypeCheck(compression, (PyTypeObject *)compression_type))
        member = Py_NewRef(compression);
    else
        member = compression == NULL ? PyObject_CallFunction(compression_type, "i", 0)
                                     : PyObject_CallOneArg(compression_type, compression);
    if (member == NULL) return -1;
    long codec = PyLong_AsLong(member);
    if (codec == -1 && PyErr_Occurred()) {
        Py_DECREF(member);
        return -1;
    }
    Py_XSETREF(self->compression, member);
    self->attributes = (int)codec | (is_transactional ? TRANSACTIONAL_MASK : 0);
    self->producer_id = producer_id;
    self->producer_epoch = producer_epoch;
    self->base_sequence = (int32_t)base_sequence;
    self->used = 0;
    self->records_count = 0;
    self->base_timestamp = NO_TIMESTAMP;
    self->max_timestamp = NO_TIMESTAMP;
    return 0;
}

static void dealloc(BatchRecords *self) {
    PyMem_Free(self->records);
    Py_XDECREF(self->compression);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef batch_records_methods[] = {
    {"append_within", (PyCFunction)(void (*)(void))append_within, METH_FASTCALL, append_within_doc},
    {"append_values", (PyCFunction)(void (*)(void))append_values, METH_FASTCALL, append_values_doc},
    {"build", (PyCFunction)build, METH_NOARGS, build_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef batch_records_getset[] = {
    {"size_bytes", (getter)get_size_bytes, NULL, "Bytes of the batch built now, before compression.", NULL},
    {"records_count", (getter)get_records_count, NULL, "Records appended so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject batch_records_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqbroker.client._batch_records.BatchRecords",
    .tp_doc = PyDoc_STR("A producer batch's records, encoded as they are appended; build() gives the batch bytes."),
    .tp_basicsize = sizeof(BatchRecords),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_methods = batch_records_methods,
    .tp_getset = batch_records_getset,
};

/* Where a sent record is: its batch, its index there and its timestamp; the blocking producer's RecordFuture
   subclasses it, so a send makes its future without running Python code (batch_records.RecordSlotPython). */
typedef struct {
    PyObject_HEAD
    PyObject *batch;
    PyObject *index;
    PyObject *timestamp_ms;
} RecordSlot;

static PyObject *record_slot_new(PyTypeObject *type, PyObject *positional, PyObject *keywords) {
    PyObject *batch, *index, *timestamp_ms;
    if (keywords != NULL && PyDict_GET_SIZE(keywords) != 0) {
        PyErr_SetString(PyExc_TypeError, "RecordSlot takes positional arguments only");
        return NULL;
    }
    if (!PyArg_UnpackTuple(positional, "RecordSlot", 3, 3, &batch, &index, &timestamp_ms)) return NULL;
    RecordSlot *self = (RecordSlot *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->batch = Py_NewRef(batch);
    self->index = Py_NewRef(index);
    self->timestamp_ms = Py_NewRef(timestamp_ms);
    return (PyObject *)self;
}

static int record_slot_traverse(RecordSlot *self, visitproc visit, void *arg) {
    Py_VISIT(self->batch);
    Py_VISIT(self->index);
    Py_VISIT(self->timestamp_ms);
    return 0;
}

static int record_slot_clear(RecordSlot *self) {
    Py_CLEAR(self->batch);
    Py_CLEAR(self->index);
    Py_CLEAR(self->timestamp_ms);
    return 0;
}

/* (A subclass's own dealloc and traverse, Python's, take care of its heap type's reference.) */
static void record_slot_dealloc(RecordSlot *self) {
    PyObject_GC_UnTrack(self);
    record_slot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef record_slot_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(RecordSlot, batch), READONLY, "The record's batch."},
    {"_index", T_OBJECT_EX, offsetof(RecordSlot, index), READONLY, "The record's index in its batch."},
    {"_timestamp_ms", T_OBJECT_EX, offsetof(RecordSlot, timestamp_ms), READONLY, "The record's timestamp."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject record_slot_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqbroker.client._batch_records.RecordSlot",
    .tp_doc = PyDoc_STR("RecordSlot(batch, index, timestamp_ms): where a sent record is."),
    .tp_basicsize = sizeof(RecordSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = record_slot_new,
    .tp_traverse = (traverseproc)record_slot_traverse,
    .tp_clear = (inquiry)record_slot_clear,
    .tp_dealloc = (destructor)record_slot_dealloc,
    .tp_members = record_slot_members,
};

static int exec_module(PyObject *module) {
    if (compression_type == NULL) {
        PyObject *compression = PyImport_ImportModule("mqbroker.records.compression");
        if (compression == NULL) return -1;
        compression_type = PyObject_GetAttrString(compression, "Compression");
        compress_function = PyObject_GetAttrString(compression, "compress");
        Py_DECREF(compression);
        PyObject *crc32c = PyImport_ImportModule("crc32c");
        if (crc32c == NULL) return -1;
        crc32c_function = PyObject_GetAttrString(crc32c, "crc32c");
        Py_DECREF(crc32c);
        if (compression_type == NULL || compress_function == NULL || crc32c_function == NULL) return -1;
    }
    if (PyType_Ready(&batch_records_type) < 0 || PyType_Ready(&record_slot_type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "RecordSlot", (PyObject *)&record_slot_type) < 0) return -1;
    return PyModule_AddObjectRef(module, "BatchRecords", (PyObject *)&batch_records_type);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mqbroker.client._batch_records",
    .m_doc = "A producer batch's records encoded in C (see mqbroker.client.batch_records).",
    .m_size = 0,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__batch_records(void) { return PyModuleDef_Init(&module_definition); }
