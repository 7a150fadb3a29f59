/* The consumer's hot loop in C: the records of one uncompressed record batch (magic 2) as
 * ConsumerRecord tuples, in one call. exactly.client.decode uses it when it is built and
 * keeps its pure-Python decoder as the fallback and the reference (tests check both agree).
 *
 * Only well-formed data is decoded here. Anything else -- a record running past the end,
 * bytes left over, a negative length other than -1 (null), a varint of more than 64 bits,
 * an offset or timestamp that overflows int64 -- makes decode_records return None, and the
 * Python loop decodes the batch: the same records, or the same error, as without this module.
 *
 * Record layout (KIP-98): length varint, attributes int8, timestampDelta varint, offsetDelta
 * varint, keyLength varint, key, valueLength varint, value, header count varint, then per
 * header: keyLength varint, key (UTF-8), valueLength varint, value. Varints are zigzag.
 *
 * The records are tuples of a subclass of tuple (the NamedTuple ConsumerRecord), made without
 * GC tracking: they hold only str, int, bytes, None and tuples of those, so they can never be
 * part of a reference cycle, and the collector need not walk the records that wait in a
 * consumer's queue (CPython only untracks exact tuples itself).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef const unsigned char *cursor;

/* An unsigned varint of at most 64 bits at *p; 0, or -1 when truncated or too long. */
static inline int
read_uvarint(cursor *p, cursor end, uint64_t *out)
{
    cursor q = *p;
    uint64_t r = 0;
    int shift = 0;
    while (q < end) {
        unsigned char b = *q++;
        if (shift == 63 && b > 1)
            return -1;
        r |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *p = q;
            *out = r;
            return 0;
        }
        shift += 7;
        if (shift > 63)
            return -1;
    }
    return -1;
}

static inline int
read_varint(cursor *p, cursor end, int64_t *out)
{
    uint64_t r;
    if (read_uvarint(p, end, &r) < 0)
        return -1;
    *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
    return 0;
}

/* A key or value: *out is a new reference (None for length -1); 0, or -1 to fall back. */
static inline int
read_bytes(cursor *p, cursor end, PyObject **out)
{
    int64_t n;
    if (*p < end && **p == 1) { /* -1: null, as every producer writes it */
        (*p)++;
        Py_INCREF(Py_None);
        *out = Py_None;
        return 0;
    }
    if (read_varint(p, end, &n) < 0 || n < 0 || n > end - *p)
        return -1;
    *out = PyBytes_FromStringAndSize((const char *)*p, (Py_ssize_t)n);
    if (*out == NULL)
        return -2;
    *p += n;
    return 0;
}

/* The headers of one record: a tuple of (str, bytes | None); -1 to fall back, -2 on error. */
static int
read_headers(cursor *p, cursor end, int64_t count, PyObject **out)
{
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL)
        return -2;
    for (int64_t i = 0; i < count; i++) {
        int64_t n;
        PyObject *key, *value, *pair;
        if (read_varint(p, end, &n) < 0 || n < 0 || n > end - *p)
            goto fallback;
        key = PyUnicode_DecodeUTF8((const char *)*p, (Py_ssize_t)n, "replace");
        if (key == NULL)
            goto error;
        *p += n;
        if (read_varint(p, end, &n) < 0 || n > end - *p) {
            Py_DECREF(key);
            goto fallback;
        }
        if (n < 0) { /* the Python loop reads any negative length as null */
            Py_INCREF(Py_None);
            value = Py_None;
        }
        else {
            value = PyBytes_FromStringAndSize((const char *)*p, (Py_ssize_t)n);
            if (value == NULL) {
                Py_DECREF(key);
                goto error;
            }
            *p += n;
        }
        pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL)
            goto error;
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    *out = headers;
    return 0;
fallback:
    Py_DECREF(headers);
    return -1;
error:
    Py_DECREF(headers);
    return -2;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(record_type, data, start, end, count, base_offset, base_timestamp,\n"
"               log_append_time, topic, partition, min_offset) -> list | None\n\n"
"The records of data[start:end], the uncompressed records section of a batch, as\n"
"record_type(topic, partition, offset, key, value, headers, timestamp, timestamp_type);\n"
"records below min_offset are left out. log_append_time >= 0: every record takes it as its\n"
"timestamp (LogAppendTime). None when the data is not well formed: decode it in Python.");

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *rtype;
    Py_buffer view;
    Py_ssize_t start, stop, count, kept = 0;
    long long base_offset, base_ts, log_append_ts, min_offset;
    PyObject *topic, *partition, *ts_type = NULL, *list = NULL, *no_headers = NULL;
    PyObject *stamp = NULL; /* the last timestamp made: consecutive records often share it */
    int64_t stamp_value = 0;
    cursor p, end;

    (void)module;
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "decode_records takes 11 arguments, got %zd", nargs);
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a type");
        return NULL;
    }
    rtype = (PyTypeObject *)args[0];
    /* Made like a tuple: a subclass of tuple with nothing of its own (a NamedTuple). */
    if (!PyType_IsSubtype(rtype, &PyTuple_Type) || rtype->tp_basicsize != PyTuple_Type.tp_basicsize
        || rtype->tp_itemsize != PyTuple_Type.tp_itemsize || rtype->tp_dictoffset != 0
        || rtype->tp_weaklistoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a NamedTuple class");
        return NULL;
    }
    start = PyLong_AsSsize_t(args[2]);
    stop = PyLong_AsSsize_t(args[3]);
    count = PyLong_AsSsize_t(args[4]);
    base_offset = PyLong_AsLongLong(args[5]);
    base_ts = PyLong_AsLongLong(args[6]);
    log_append_ts = PyLong_AsLongLong(args[7]);
    min_offset = PyLong_AsLongLong(args[10]);
    if (PyErr_Occurred())
        return NULL;
    topic = args[8];
    partition = args[9];
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within data");
        return NULL;
    }
    p = (cursor)view.buf + start;
    end = (cursor)view.buf + stop;
    /* Every record takes at least 7 bytes: a count the data cannot hold is not ours to
     * allocate for. */
    if (count < 0 || count > (stop - start) / 7 + 1)
        goto fallback;
    ts_type = PyLong_FromLong(log_append_ts >= 0 ? 1 : 0);
    no_headers = PyTuple_New(0);
    list = PyList_New(count);
    if (list == NULL || no_headers == NULL || ts_type == NULL)
        goto error;

    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t ts_delta, offset_delta, offset, n_headers, ts;
        PyObject *key, *value, *headers, *offset_obj, *record;
        PyObject **items;

        /* length (the fields are read in order, as the Python loop does) and attributes */
        while (p < end && *p >= 0x80)
            p++;
        if (end - p < 2)
            goto fallback;
        p += 2;
        if (read_varint(&p, end, &ts_delta) < 0
            || read_varint(&p, end, &offset_delta) < 0
            || __builtin_add_overflow(base_offset, offset_delta, &offset))
            goto fallback;
        if (log_append_ts >= 0)
            ts = log_append_ts;
        else if (__builtin_add_overflow(base_ts, ts_delta, &ts))
            goto fallback;
        switch (read_bytes(&p, end, &key)) {
        case -1: goto fallback;
        case -2: goto error;
        }
        switch (read_bytes(&p, end, &value)) {
        case -1: Py_DECREF(key); goto fallback;
        case -2: Py_DECREF(key); goto error;
        }
        if (p < end && *p == 0) {
            p++;
            Py_INCREF(no_headers);
            headers = no_headers;
        }
        else {
            int rc;
            if (read_varint(&p, end, &n_headers) < 0 || n_headers < 0
                || n_headers > (end - p) / 2) {
                Py_DECREF(key);
                Py_DECREF(value);
                goto fallback;
            }
            rc = read_headers(&p, end, n_headers, &headers);
            if (rc < 0) {
                Py_DECREF(key);
                Py_DECREF(value);
                if (rc == -1)
                    goto fallback;
                goto error;
            }
        }
        if (offset < min_offset) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            continue;
        }
        if (stamp == NULL || ts != stamp_value) {
            Py_XDECREF(stamp);
            stamp = PyLong_FromLongLong(ts);
            stamp_value = ts;
        }
        offset_obj = PyLong_FromLongLong(offset);
        record = stamp != NULL && offset_obj != NULL
                 ? (PyObject *)PyObject_GC_NewVar(PyTupleObject, rtype, 8) : NULL;
        if (record == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            Py_XDECREF(offset_obj);
            goto error;
        }
        items = ((PyTupleObject *)record)->ob_item;
        Py_INCREF(topic);
        items[0] = topic;
        Py_INCREF(partition);
        items[1] = partition;
        items[2] = offset_obj;
        items[3] = key;
        items[4] = value;
        items[5] = headers;
        Py_INCREF(stamp);
        items[6] = stamp;
        Py_INCREF(ts_type);
        items[7] = ts_type;
        PyList_SET_ITEM(list, kept, record);
        kept++;
    }
    if (p != end)
        goto fallback;
    if (kept < count && PyList_SetSlice(list, kept, count, NULL) < 0)
        goto error;
    Py_XDECREF(stamp);
    Py_DECREF(no_headers);
    Py_DECREF(ts_type);
    PyBuffer_Release(&view);
    return list;

fallback:
    Py_XDECREF(stamp);
    Py_XDECREF(list); /* list_dealloc skips the slots not filled (NULL) */
    Py_XDECREF(no_headers);
    Py_XDECREF(ts_type);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(stamp);
    Py_XDECREF(list);
    Py_XDECREF(no_headers);
    Py_XDECREF(ts_type);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     decode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exactly.client._decode",
    .m_doc = "Record batch decoding for the consumer, in C (see exactly.client.decode).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__decode(void)
{
    return PyModule_Create(&module);
}
