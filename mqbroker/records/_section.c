/* The records section of a RecordBatch v2, decoded in C: mqbroker.records._section.decode_section.
 *
 * A line-for-line port of mqbroker/records/section.py (the reference decoder): the same arguments, the same
 * records, and for malformed input the same CorruptRecordError with the same message. Every byte read is
 * checked against the section's size first (the AT macro), every length against its record's end, so garbage
 * raises and never reads past the buffer. Built by setup.py (ext_modules); tests/unit/records/test_section.py
 * fuzzes it against the reference.
 *
 * decode_section_values checks every record the same way but hands out only the values (or (key, value) pairs) of
 * those at or after a start offset, for Consumer.poll_values; its reference is decoder.decode_section_values_python
 * (tests/unit/records/test_section_values.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *corrupt_record_error; /* mqbroker.records.errors.CorruptRecordError */

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
} Section;

/* The message section.py gives when an index runs past the section (its IndexError). */
static int past_section(void) {
    PyErr_SetString(corrupt_record_error, "a record runs past the end of the records section");
    return -1;
}

#define AT(section, position, byte_out)                                   \
    do {                                                                  \
        if ((position) >= (section)->size) return past_section();        \
        (byte_out) = (section)->data[(position)];                         \
    } while (0)

static inline int64_t zigzag(uint64_t unsigned_value) {
    return (int64_t)((unsigned_value >> 1) ^ (~(unsigned_value & 1) + 1));
}

/* varint.read_varint: a zig-zag varint of at most `bits` bits ending before `end`. */
static int read_varint(const Section *section, Py_ssize_t position, Py_ssize_t end, int bits, int64_t *value,
                       Py_ssize_t *next) {
    uint64_t unsigned_value = 0;
    int shift = 0;
    Py_ssize_t index = position;
    Py_ssize_t limit = position + (bits + 6) / 7;
    if (end < limit) limit = end;
    while (index < limit) {
        unsigned char byte = section->data[index];
        index++;
        uint64_t group = byte & 0x7F;
        if (byte < 0x80) {
            if (shift + 7 > bits && (group >> (bits - shift)) != 0) break; /* more than `bits` bits */
            unsigned_value |= group << shift;
            *value = zigzag(unsigned_value);
            *next = index;
            return 0;
        }
        unsigned_value |= group << shift;
        shift += 7;
    }
    PyErr_Format(corrupt_record_error, "bad %d-bit varint at byte %zd: truncated, too long or out of range", bits,
                 position);
    return -1;
}

/* section._read_nullable_bytes: a varint length (-1: None) and that many bytes inside the record. */
static int read_nullable_bytes(const Section *section, Py_ssize_t position, Py_ssize_t end, PyObject **out,
                               Py_ssize_t *next) {
    int64_t length;
    if (read_varint(section, position, end, 32, &length, &position) < 0) return -1;
    if (length == -1) {
        *out = Py_NewRef(Py_None);
        *next = position;
        return 0;
    }
    if (length < -1 || position + length > end) {
        PyErr_Format(corrupt_record_error, "field of %lld bytes at byte %zd runs past its record", (long long)length,
                     position);
        return -1;
    }
    *out = PyBytes_FromStringAndSize((const char *)section->data + position, (Py_ssize_t)length);
    if (*out == NULL) return -1;
    *next = position + length;
    return 0;
}

/* Raise CorruptRecordError(message + str(the pending UnicodeDecodeError)) from that error. */
static void raise_from_decode_error(const char *message) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    PyErr_Format(corrupt_record_error, "%s%S", message, value);
    PyObject *new_type, *new_value, *new_traceback;
    PyErr_Fetch(&new_type, &new_value, &new_traceback);
    PyErr_NormalizeException(&new_type, &new_value, &new_traceback);
    if (new_value != NULL && value != NULL) {
        PyException_SetCause(new_value, Py_NewRef(value));
        PyException_SetContext(new_value, Py_NewRef(value));
    }
    PyErr_Restore(new_type, new_value, new_traceback);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* section._read_headers: a varint count of (UTF-8 key, nullable value) pairs, as a tuple. */
static int read_headers(const Section *section, Py_ssize_t position, Py_ssize_t end, PyObject **out,
                        Py_ssize_t *next) {
    int64_t count;
    if (read_varint(section, position, end, 32, &count, &position) < 0) return -1;
    if (count < 0) {
        PyErr_Format(corrupt_record_error, "negative record header count %lld", (long long)count);
        return -1;
    }
    PyObject *headers = PyList_New(0);
    if (headers == NULL) return -1;
    for (int64_t index = 0; index < count; index++) {
        PyObject *raw_key = NULL, *header_value = NULL;
        if (read_nullable_bytes(section, position, end, &raw_key, &position) < 0) goto error;
        if (raw_key == Py_None) {
            Py_DECREF(raw_key);
            PyErr_SetString(corrupt_record_error, "record header with a null key");
            goto error;
        }
        PyObject *key = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw_key), PyBytes_GET_SIZE(raw_key), "strict");
        Py_DECREF(raw_key);
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) raise_from_decode_error("record header key is not UTF-8: ");
            goto error;
        }
        if (read_nullable_bytes(section, position, end, &header_value, &position) < 0) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *pair = PyTuple_Pack(2, key, header_value);
        Py_DECREF(key);
        Py_DECREF(header_value);
        if (pair == NULL) goto error;
        PyObject_GC_UnTrack(pair); /* a str and bytes or None: no cycle can pass through it */
        int appended = PyList_Append(headers, pair);
        Py_DECREF(pair);
        if (appended < 0) goto error;
    }
    *out = PyList_AsTuple(headers);
    Py_DECREF(headers);
    if (*out == NULL) return -1;
    if (PyTuple_GET_SIZE(*out)) PyObject_GC_UnTrack(*out); /* untracked pairs only (the empty tuple is shared) */
    *next = position;
    return 0;
error:
    Py_DECREF(headers);
    return -1;
}

/* An int64 sum, or a Python int when it does not fit (as section.py's arbitrary-precision arithmetic gives). */
static PyObject *sum_as_int(int64_t left, int64_t right) {
    int64_t sum;
    if (!__builtin_add_overflow(left, right, &sum)) return PyLong_FromLongLong(sum);
    PyObject *left_object = PyLong_FromLongLong(left);
    PyObject *right_object = PyLong_FromLongLong(right);
    PyObject *result = (left_object && right_object) ? PyNumber_Add(left_object, right_object) : NULL;
    Py_XDECREF(left_object);
    Py_XDECREF(right_object);
    return result;
}

/* Values-only decoding (decode_section_values): no row, offset or timestamp object per record. */
enum { VALUES_OFF = 0, VALUES_ONLY, VALUES_WITH_KEYS };

typedef struct {
    int64_t base_offset, base_timestamp, last_offset_delta, records_count, log_append_time;
    int has_log_append_time;
    PyObject *make;    /* a callable, or with `leading` a tuple type */
    PyObject *leading; /* NULL, or the fields every row starts with */
    /* Rows hold only values that cannot reach a cycle (ints, bytes, None, the untracked headers and
       `leading` values the collector does not track) and have no __dict__ or slots of their own:
       they are left out of the cyclic collector, as CPython leaves tuples of such values. Tracked,
       every fetch's tens of thousands of rows were walked again by each later full collection. */
    int untrack_rows;
    int values;            /* VALUES_OFF, or what decode_section_values hands out per record */
    int64_t start_offset;  /* values-only: records before it are left out */
    PyObject *first_offset; /* values-only: the first kept record's offset (a new reference), or NULL */
} Batch;

/* A values-only record: its value (or an untracked (key, value) pair) in *row_out, or NULL there when its offset lies
   before start_offset; the first kept record's offset goes to batch->first_offset. Takes the fields' references. */
static int take_value(Batch *batch, Py_ssize_t *position_io, Py_ssize_t position, int64_t offset_delta,
                      PyObject *key, PyObject *value, PyObject *headers, PyObject **row_out) {
    Py_DECREF(headers);
    *position_io = position;
    *row_out = NULL;
    int64_t offset;
    int overflow = __builtin_add_overflow(batch->base_offset, offset_delta, &offset);
    if (!overflow && offset < batch->start_offset) { /* a fetch that began inside this batch */
        Py_DECREF(key);
        Py_DECREF(value);
        return 0;
    }
    if (batch->first_offset == NULL) {
        batch->first_offset = sum_as_int(batch->base_offset, offset_delta);
        if (batch->first_offset == NULL) goto error;
    }
    if (batch->values == VALUES_ONLY) {
        Py_DECREF(key);
        *row_out = value;
        return 0;
    }
    *row_out = PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    if (*row_out == NULL) return -1;
    PyObject_GC_UnTrack(*row_out); /* bytes or None: no cycle can pass through it */
    return 0;
error:
    Py_DECREF(key);
    Py_DECREF(value);
    return -1;
}

/* One record's row: make(offset, key, value, headers, timestamp), or the tuple type filled with leading + fields. */
static PyObject *make_row(const Batch *batch, PyObject *fields[5]) {
    if (batch->leading == NULL) return PyObject_Vectorcall(batch->make, fields, 5, NULL);
    Py_ssize_t leading_count = PyTuple_GET_SIZE(batch->leading);
    PyTypeObject *row_type = (PyTypeObject *)batch->make;
    PyObject *row = row_type == &PyTuple_Type ? PyTuple_New(leading_count + 5)
                                              : row_type->tp_alloc(row_type, leading_count + 5);
    if (row == NULL) return NULL;
    for (Py_ssize_t index = 0; index < leading_count; index++)
        PyTuple_SET_ITEM(row, index, Py_NewRef(PyTuple_GET_ITEM(batch->leading, index)));
    for (Py_ssize_t index = 0; index < 5; index++) PyTuple_SET_ITEM(row, leading_count + index, Py_NewRef(fields[index]));
    if (batch->untrack_rows && PyObject_GC_IsTracked(row)) PyObject_GC_UnTrack(row);
    return row;
}

/* Decode one record at *position into a row; 0, or -1 with CorruptRecordError (or MemoryError) set. */
static int decode_record(const Section *section, Batch *batch, Py_ssize_t *position_io,
                         int64_t *previous_offset_delta, PyObject **row_out) {
    const Py_ssize_t size = section->size;
    const unsigned char *data = section->data;
    Py_ssize_t position = *position_io;
    unsigned char byte, next_byte;
    int64_t length, timestamp_delta, offset_delta;

    if (position + 1 < size && data[position] < 0x80) {
        length = zigzag(data[position]);
        position += 1;
    } else if (position + 1 < size && data[position + 1] < 0x80) {
        length = zigzag((uint64_t)(data[position] & 0x7F) | (uint64_t)data[position + 1] << 7);
        position += 2;
    } else if (read_varint(section, position, size, 32, &length, &position) < 0) {
        return -1;
    }
    Py_ssize_t end = position + length;
    if (length < 0 || end > size) {
        PyErr_Format(corrupt_record_error, "record of %lld bytes at byte %zd runs past the records section",
                     (long long)length, position);
        return -1;
    }
    AT(section, position + 1, byte); /* position holds the unused attributes byte */
    if (byte < 0x80 && position + 2 < end) {
        timestamp_delta = zigzag(byte);
        position += 2;
    } else if (read_varint(section, position + 1, end, 64, &timestamp_delta, &position) < 0) {
        return -1;
    }
    AT(section, position, byte);
    if (byte < 0x80 && position + 1 < end) {
        offset_delta = zigzag(byte);
        position += 1;
    } else if (read_varint(section, position, end, 32, &offset_delta, &position) < 0) {
        return -1;
    }
    if (!(*previous_offset_delta < offset_delta && offset_delta <= batch->last_offset_delta)) {
        PyErr_Format(corrupt_record_error, "record offset delta %lld is out of order or past the batch's last",
                     (long long)offset_delta);
        return -1;
    }
    *previous_offset_delta = offset_delta;

    PyObject *key = NULL, *value = NULL, *headers = NULL;
    AT(section, position, byte);
    if (byte == 1 && position + 1 < end) { /* zig-zag 1 is -1: a null key */
        key = Py_NewRef(Py_None);
        position += 1;
    } else if (read_nullable_bytes(section, position, end, &key, &position) < 0) {
        return -1;
    }
    if (position >= size) {
        Py_DECREF(key);
        return past_section();
    }
    byte = data[position];
    Py_ssize_t stop = -1, start = 0;
    if (1 < byte && byte < 0x80 && !(byte & 1)) { /* a short value (a non-negative one-byte length) */
        start = position + 1;
        stop = start + (byte >> 1);
    } else if (byte >= 0x80) {
        if (position + 1 >= size) {
            Py_DECREF(key);
            return past_section();
        }
        next_byte = data[position + 1];
        if (next_byte < 0x80 && !(byte & 1)) { /* a two-byte non-negative length */
            start = position + 2;
            stop = start + ((((Py_ssize_t)(byte & 0x7F)) | ((Py_ssize_t)next_byte << 7)) >> 1);
        }
    }
    if (stop >= 0) {
        if (stop > end) {
            PyErr_Format(corrupt_record_error, "field of %zd bytes at byte %zd runs past its record", stop - start,
                         start);
            Py_DECREF(key);
            return -1;
        }
        value = PyBytes_FromStringAndSize((const char *)data + start, stop - start);
        if (value == NULL) {
            Py_DECREF(key);
            return -1;
        }
        position = stop;
    } else if (read_nullable_bytes(section, position, end, &value, &position) < 0) {
        Py_DECREF(key);
        return -1;
    }
    if (position + 1 == end && data[position] == 0) { /* the common case: no headers */
        headers = PyTuple_New(0);
        position = end;
    } else if (read_headers(section, position, end, &headers, &position) < 0) {
        headers = NULL;
    }
    if (headers == NULL) goto error;
    if (position != end) {
        PyErr_Format(corrupt_record_error, "record ends at byte %zd but its length says %zd", position, end);
        goto error;
    }
    if (batch->values != VALUES_OFF) return take_value(batch, position_io, position, offset_delta, key, value, headers,
                                                       row_out);
    PyObject *offset = sum_as_int(batch->base_offset, offset_delta);
    PyObject *timestamp = batch->has_log_append_time ? PyLong_FromLongLong(batch->log_append_time)
                                                     : sum_as_int(batch->base_timestamp, timestamp_delta);
    if (offset == NULL || timestamp == NULL) {
        Py_XDECREF(offset);
        Py_XDECREF(timestamp);
        goto error;
    }
    PyObject *fields[5] = {offset, key, value, headers, timestamp};
    *row_out = make_row(batch, fields);
    Py_DECREF(offset);
    Py_DECREF(timestamp);
    Py_DECREF(key);
    Py_DECREF(value);
    Py_DECREF(headers);
    if (*row_out == NULL) return -1;
    *position_io = position;
    return 0;
error:
    Py_DECREF(key);
    Py_DECREF(value);
    Py_XDECREF(headers);
    return -1;
}

static int int64_argument(PyObject *object, const char *name, int64_t *out) {
    if (!PyLong_Check(object)) {
        PyErr_Format(PyExc_TypeError, "decode_section: %s must be an int, not %.100s", name, Py_TYPE(object)->tp_name);
        return -1;
    }
    long long value = PyLong_AsLongLong(object);
    if (value == -1 && PyErr_Occurred()) return -1;
    *out = value;
    return 0;
}

/* A row type with the layout of a tuple (no __dict__, no slots) and leading values the collector does not track. */
static int rows_may_be_untracked(PyTypeObject *row_type, PyObject *leading) {
    if (row_type->tp_dictoffset != 0 || row_type->tp_basicsize != PyTuple_Type.tp_basicsize) return 0;
    for (Py_ssize_t index = 0; index < PyTuple_GET_SIZE(leading); index++)
        if (PyObject_GC_IsTracked(PyTuple_GET_ITEM(leading, index))) return 0;
    return 1;
}

static PyObject *decode_all(PyObject *data, Batch *batch);

PyDoc_STRVAR(decode_section_doc,
"decode_section(data, base_offset, base_timestamp, last_offset_delta, records_count, log_append_time, make, leading)\n"
"--\n\n"
"The records of a batch's (decompressed) records section, as section.decode_section_python gives them:\n"
"make(offset, key, value, headers, timestamp_ms) per record, or with `leading` (a tuple) rows of the tuple type\n"
"`make` holding leading + those fields. Malformed input raises CorruptRecordError.");

static PyObject *decode_section(PyObject *module, PyObject *const *arguments, Py_ssize_t count) {
    (void)module;
    if (count != 8) {
        PyErr_Format(PyExc_TypeError, "decode_section takes 8 arguments (%zd given)", count);
        return NULL;
    }
    Batch batch = {0};
    if (int64_argument(arguments[1], "base_offset", &batch.base_offset) < 0 ||
        int64_argument(arguments[2], "base_timestamp", &batch.base_timestamp) < 0 ||
        int64_argument(arguments[3], "last_offset_delta", &batch.last_offset_delta) < 0 ||
        int64_argument(arguments[4], "records_count", &batch.records_count) < 0)
        return NULL;
    if (arguments[5] != Py_None) {
        if (int64_argument(arguments[5], "log_append_time", &batch.log_append_time) < 0) return NULL;
        batch.has_log_append_time = 1;
    }
    batch.make = arguments[6];
    if (arguments[7] != Py_None) {
        if (!PyTuple_Check(arguments[7])) {
            PyErr_SetString(PyExc_TypeError, "decode_section: leading must be a tuple or None");
            return NULL;
        }
        if (!PyType_Check(batch.make) || !PyType_IsSubtype((PyTypeObject *)batch.make, &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "decode_section: with leading fields, make must be a tuple type");
            return NULL;
        }
        batch.leading = arguments[7];
        batch.untrack_rows = rows_may_be_untracked((PyTypeObject *)batch.make, batch.leading);
    } else if (!PyCallable_Check(batch.make)) {
        PyErr_SetString(PyExc_TypeError, "decode_section: make must be callable");
        return NULL;
    }

    return decode_all(arguments[0], &batch);
}

/* Every record of `data` by `batch`'s settings, as a list (rows, or values with batch->values). */
static PyObject *decode_all(PyObject *data, Batch *batch) {
    Py_buffer buffer;
    if (PyObject_GetBuffer(data, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    Section section = {(const unsigned char *)buffer.buf, buffer.len};
    /* A record takes at least 7 bytes, so no more records than that can decode: a count from garbage cannot
       make a huge list. */
    Py_ssize_t capacity = section.size / 7;
    if (batch->records_count < capacity) capacity = batch->records_count < 0 ? 0 : (Py_ssize_t)batch->records_count;
    PyObject *rows = PyList_New(capacity);
    if (rows == NULL) goto error;
    Py_ssize_t position = 0, kept = 0;
    int64_t previous_offset_delta = -1;
    for (int64_t index = 0; index < batch->records_count; index++) {
        PyObject *row;
        if (decode_record(&section, batch, &position, &previous_offset_delta, &row) < 0) goto error;
        if (row == NULL) continue; /* values-only: before start_offset */
        if (kept < capacity) {
            PyList_SET_ITEM(rows, kept, row);
        } else {
            int appended = PyList_Append(rows, row);
            Py_DECREF(row);
            if (appended < 0) goto error;
        }
        kept++;
    }
    if (position != section.size) {
        PyErr_Format(corrupt_record_error, "%zd bytes follow the batch's %lld records", section.size - position,
                     (long long)batch->records_count);
        goto error;
    }
    if (kept < capacity && PyList_SetSlice(rows, kept, capacity, NULL) < 0) goto error; /* the unfilled slots */
    PyBuffer_Release(&buffer);
    return rows;
error:
    Py_XDECREF(rows);
    PyBuffer_Release(&buffer);
    return NULL;
}

PyDoc_STRVAR(decode_section_values_doc,
"decode_section_values(data, base_offset, last_offset_delta, records_count, start_offset, with_keys)\n"
"--\n\n"
"(first offset or None, values) of a batch's (decompressed) records section, as decoder.decode_section_values_python\n"
"gives them: each record's value (with_keys: an untracked (key, value) tuple) at or after start_offset, and no\n"
"other object per record. Every record is checked as decode_section checks it; malformed input raises\n"
"CorruptRecordError with the same message.");

static PyObject *decode_section_values(PyObject *module, PyObject *const *arguments, Py_ssize_t count) {
    (void)module;
    if (count != 6) {
        PyErr_Format(PyExc_TypeError, "decode_section_values takes 6 arguments (%zd given)", count);
        return NULL;
    }
    Batch batch = {0};
    if (int64_argument(arguments[1], "base_offset", &batch.base_offset) < 0 ||
        int64_argument(arguments[2], "last_offset_delta", &batch.last_offset_delta) < 0 ||
        int64_argument(arguments[3], "records_count", &batch.records_count) < 0 ||
        int64_argument(arguments[4], "start_offset", &batch.start_offset) < 0)
        return NULL;
    int with_keys = PyObject_IsTrue(arguments[5]);
    if (with_keys < 0) return NULL;
    batch.values = with_keys ? VALUES_WITH_KEYS : VALUES_ONLY;
    PyObject *values = decode_all(arguments[0], &batch);
    if (values == NULL) {
        Py_XDECREF(batch.first_offset);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, batch.first_offset ? batch.first_offset : Py_None, values);
    Py_XDECREF(batch.first_offset);
    Py_DECREF(values);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_section", (PyCFunction)(void (*)(void))decode_section, METH_FASTCALL, decode_section_doc},
    {"decode_section_values", (PyCFunction)(void (*)(void))decode_section_values, METH_FASTCALL,
     decode_section_values_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
    (void)module;
    if (corrupt_record_error != NULL) return 0;
    PyObject *errors = PyImport_ImportModule("mqbroker.records.errors");
    if (errors == NULL) return -1;
    corrupt_record_error = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    return corrupt_record_error == NULL ? -1 : 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mqbroker.records._section",
    .m_doc = "The records section of a RecordBatch v2 decoded in C (see mqbroker.records.section).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__section(void) { return PyModuleDef_Init(&module_definition); }
