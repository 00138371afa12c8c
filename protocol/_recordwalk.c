/*
 * semel.protocol._recordwalk: the fast record walker of protocol/validator.py, in C.
 *
 * walk(buf, pos, end, index, count, dlow, dhigh, none_delta, mode, require_keys,
 *      max_delta, errors, room) -> (pos, index, max_delta, found, found_ts, status)
 *
 * Exactly _walk_py's contract: walk the whole v2 records in buf[pos:end] from record
 * `index`, stop at the first record that is not whole in the window (INCOMPLETE), that
 * breaks any framing rule (SUSPECT: Python's careful reader then names the rule), or after
 * record count-1 (DONE). Record errors (index, kind, timestamp delta) go to `errors`, at
 * most `room` of them. Lengths are checked against the record's end before anything is
 * read, varints are at most 5 bytes (varlong 10). Optional: without a compiler the
 * package installs without it and validator.py uses the pure-Python walker.
 *
 * The GIL is released while walking windows of 64 KiB or more (the buffer is held by the
 * Py_buffer export, so it cannot be resized meanwhile); record errors are collected in a C
 * array and appended to the list once the GIL is back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { DONE = 0, SUSPECT = 1, INCOMPLETE = 2 };
enum { TS_NONE = 0, TS_RANGE = 1, TS_ALL = 2 };
enum { KEY_MISSING = 0, BAD_TIMESTAMP = 1 };
enum { VARINT_OK = 0, VARINT_PAST_END = -1, VARINT_TOO_LONG = -2 };

#define NOGIL_THRESHOLD (64 * 1024)

typedef struct {
    int64_t index;
    int64_t delta;
    int kind;
} record_error;

/* Unsigned base-128 value of at most `limit` bytes at *p, never reading at or past end. */
static inline int
read_raw(const uint8_t **p, const uint8_t *end, int limit, uint64_t *out)
{
    const uint8_t *q = *p;
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < limit; i++) {
        if (q >= end)
            return VARINT_PAST_END;
        uint8_t b = *q++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = raw;
            *p = q;
            return VARINT_OK;
        }
        shift += 7;
    }
    return VARINT_TOO_LONG;
}

static inline int32_t
zigzag32(uint64_t raw)
{
    uint32_t u = (uint32_t)raw;
    return (int32_t)((u >> 1) ^ (~(u & 1) + 1));
}

static inline int64_t
zigzag64(uint64_t u)
{
    return (int64_t)((u >> 1) ^ (~(u & 1) + 1));
}

/* One length-prefixed field inside the record: -1 null, else skip it. */
static inline int
skip_bytes(const uint8_t **p, const uint8_t *rec_end, int allow_null, int32_t *length)
{
    uint64_t raw;
    if (read_raw(p, rec_end, 5, &raw) != VARINT_OK)
        return 0;
    int32_t n = zigzag32(raw);
    if (n < -1 || (n == -1 && !allow_null))
        return 0;
    if (n > 0) {
        if ((int64_t)n > rec_end - *p)
            return 0;
        *p += n;
    }
    *length = n;
    return 1;
}

typedef struct {
    /* in */
    const uint8_t *base;
    Py_ssize_t pos, end;
    int64_t index, count, dlow, dhigh, none_delta, max_delta;
    int mode, require_keys;
    Py_ssize_t room;
    record_error *errors;
    /* out */
    Py_ssize_t n_errors, found, found_ts;
    int status;
} walk_state;

static void
walk_records(walk_state *s)
{
    const uint8_t *base = s->base;
    const uint8_t *end = base + s->end;
    const uint8_t *p = base + s->pos;
    int64_t index = s->index, count = s->count, max_delta = s->max_delta;
    int64_t dlow = s->dlow, dhigh = s->dhigh, none_delta = s->none_delta;
    int mode = s->mode, require_keys = s->require_keys;
    Py_ssize_t found = 0, found_ts = 0, n_errors = 0, room = s->room;
    int status = DONE;

    while (index < count) {
        const uint8_t *start = p;
        uint64_t raw;
        if (p >= end) {
            status = INCOMPLETE;
            break;
        }
        int r = read_raw(&p, end, 5, &raw);
        if (r != VARINT_OK) {
            p = start;
            status = r == VARINT_PAST_END ? INCOMPLETE : SUSPECT;
            break;
        }
        int32_t length = zigzag32(raw);
        if (length < 0) {
            p = start;
            status = SUSPECT;
            break;
        }
        if ((int64_t)length > end - p) {
            p = start;
            status = INCOMPLETE;
            break;
        }
        const uint8_t *rec_end = p + length;
        int32_t key_length, value_length;
        int64_t delta;
        if (p >= rec_end)
            goto suspect;
        p++; /* attributes */
        if (read_raw(&p, rec_end, 10, &raw) != VARINT_OK)
            goto suspect;
        delta = zigzag64(raw);
        if (read_raw(&p, rec_end, 5, &raw) != VARINT_OK || (int64_t)zigzag32(raw) != index)
            goto suspect;
        if (!skip_bytes(&p, rec_end, 1, &key_length))
            goto suspect;
        if (!skip_bytes(&p, rec_end, 1, &value_length))
            goto suspect;
        if (read_raw(&p, rec_end, 5, &raw) != VARINT_OK)
            goto suspect;
        {
            int32_t header_count = zigzag32(raw);
            if (header_count < 0 || (int64_t)header_count * 2 > rec_end - p)
                goto suspect;
            for (int32_t j = 0; j < header_count; j++) {
                int32_t ignored;
                if (!skip_bytes(&p, rec_end, 0, &ignored) || !skip_bytes(&p, rec_end, 1, &ignored))
                    goto suspect;
            }
        }
        if (p != rec_end)
            goto suspect;

        if (delta > max_delta)
            max_delta = delta;
        {
            int kind = -1;
            if (require_keys && key_length < 0) {
                kind = KEY_MISSING;
            } else if (mode == TS_ALL ||
                       (mode == TS_RANGE && (delta < dlow || delta > dhigh) && delta != none_delta)) {
                kind = BAD_TIMESTAMP;
                found_ts++;
            }
            if (kind >= 0) {
                found++;
                if (n_errors < room) {
                    s->errors[n_errors].index = index;
                    s->errors[n_errors].delta = delta;
                    s->errors[n_errors].kind = kind;
                    n_errors++;
                }
            }
        }
        index++;
        continue;
    suspect:
        p = start;
        status = SUSPECT;
        break;
    }
    s->pos = p - base;
    s->index = index;
    s->max_delta = max_delta;
    s->found = found;
    s->found_ts = found_ts;
    s->n_errors = n_errors;
    s->status = status;
}

static PyObject *
walk(PyObject *module, PyObject *args)
{
    Py_buffer view;
    walk_state s;
    PyObject *errors;
    long long index, count, dlow, dhigh, none_delta, max_delta;
    int mode, require_keys;

    if (!PyArg_ParseTuple(args, "y*nnLLLLLipLO!n:walk", &view, &s.pos, &s.end, &index, &count,
                          &dlow, &dhigh, &none_delta, &mode, &require_keys, &max_delta,
                          &PyList_Type, &errors, &s.room))
        return NULL;
    if (s.pos < 0 || s.end > view.len || s.pos > s.end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk: pos/end outside the buffer");
        return NULL;
    }
    s.base = (const uint8_t *)view.buf;
    s.index = index;
    s.count = count;
    s.dlow = dlow;
    s.dhigh = dhigh;
    s.none_delta = none_delta;
    s.max_delta = max_delta;
    s.mode = mode;
    s.require_keys = require_keys;
    if (s.room < 0)
        s.room = 0;
    s.errors = NULL;
    if (s.room > 0) {
        s.errors = PyMem_Malloc(sizeof(record_error) * (size_t)s.room);
        if (s.errors == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
    }
    if (s.end - s.pos >= NOGIL_THRESHOLD) {
        Py_BEGIN_ALLOW_THREADS
        walk_records(&s);
        Py_END_ALLOW_THREADS
    } else {
        walk_records(&s);
    }
    PyBuffer_Release(&view);

    for (Py_ssize_t i = 0; i < s.n_errors; i++) {
        PyObject *entry = Py_BuildValue("(LiL)", (long long)s.errors[i].index, s.errors[i].kind,
                                        (long long)s.errors[i].delta);
        if (entry == NULL || PyList_Append(errors, entry) < 0) {
            Py_XDECREF(entry);
            PyMem_Free(s.errors);
            return NULL;
        }
        Py_DECREF(entry);
    }
    PyMem_Free(s.errors);
    return Py_BuildValue("(nLLnni)", s.pos, (long long)s.index, (long long)s.max_delta, s.found,
                         s.found_ts, s.status);
}

/*
 * spans(data, count, span_type) -> list of span_type | None
 *
 * protocol.records.record_spans for the log cleaner: each of the `count` records of
 * decompressed records `data` as a span_type (a tuple subclass) of (start, end,
 * offset_delta, timestamp_delta, rest, key or None, value is null). Returns None at anything
 * irregular (a length past the end, an overlong varint, bytes left over): the caller then
 * runs the Python reader, which names the error. Keys are the only objects copied out.
 */
static PyObject *
spans(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    PyTypeObject *type;

    if (!PyArg_ParseTuple(args, "y*nO!:spans", &view, &count, &PyType_Type, &type))
        return NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type) || count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "spans: span_type must be a tuple subclass");
        return NULL;
    }
    const uint8_t *base = (const uint8_t *)view.buf;
    const uint8_t *end = base + view.len;
    const uint8_t *p = base;
    PyObject *list = PyList_New(count);
    if (list == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *start = p;
        uint64_t raw;
        if (read_raw(&p, end, 5, &raw) != VARINT_OK)
            goto irregular;
        int32_t length = zigzag32(raw);
        if (length < 0 || (int64_t)length > end - p)
            goto irregular;
        const uint8_t *rec_end = p + length;
        if (p >= rec_end)
            goto irregular;
        p++; /* attributes */
        if (read_raw(&p, rec_end, 9, &raw) != VARINT_OK) /* a 10-byte varlong: Python's */
            goto irregular;
        int64_t timestamp_delta = zigzag64(raw);
        const uint8_t *rest = p;
        if (read_raw(&p, rec_end, 5, &raw) != VARINT_OK)
            goto irregular;
        int32_t offset_delta = zigzag32(raw);
        if (read_raw(&p, rec_end, 5, &raw) != VARINT_OK)
            goto irregular;
        int32_t key_length = zigzag32(raw);
        PyObject *key;
        if (key_length >= 0) {
            if ((int64_t)key_length > rec_end - p)
                goto irregular;
            key = PyBytes_FromStringAndSize((const char *)p, key_length);
            if (key == NULL)
                goto failed;
            p += key_length;
        } else {
            key = Py_NewRef(Py_None);
        }
        if (read_raw(&p, rec_end, 5, &raw) != VARINT_OK) {
            Py_DECREF(key);
            goto irregular;
        }
        int32_t value_length = zigzag32(raw);
        PyObject *span = type->tp_alloc(type, 7);
        if (span == NULL) {
            Py_DECREF(key);
            goto failed;
        }
        PyObject *items[6] = {
            PyLong_FromSsize_t(start - base), PyLong_FromSsize_t(rec_end - base),
            PyLong_FromLong(offset_delta), PyLong_FromLongLong(timestamp_delta),
            PyLong_FromSsize_t(rest - base), PyBool_FromLong(value_length < 0),
        };
        int ok = 1;
        for (int k = 0; k < 6; k++)
            ok &= items[k] != NULL;
        PyTuple_SET_ITEM(span, 0, items[0]);
        PyTuple_SET_ITEM(span, 1, items[1]);
        PyTuple_SET_ITEM(span, 2, items[2]);
        PyTuple_SET_ITEM(span, 3, items[3]);
        PyTuple_SET_ITEM(span, 4, items[4]);
        PyTuple_SET_ITEM(span, 5, key);
        PyTuple_SET_ITEM(span, 6, items[5]);
        PyList_SET_ITEM(list, i, span);
        if (!ok)
            goto failed;
        p = rec_end;
    }
    if (p != end)
        goto irregular;
    PyBuffer_Release(&view);
    return list;
irregular:
    PyBuffer_Release(&view);
    Py_DECREF(list);
    Py_RETURN_NONE;
failed:
    PyBuffer_Release(&view);
    Py_DECREF(list);
    return NULL;
}

/*
 * data_records(buf) -> int: the records of the whole v2 batches at the start of buf,
 * control batches left out (the fetch path's MessagesOut count). Reads two fields of each
 * batch header; stops at a batch that is not whole (or not v2).
 */
static PyObject *
data_records(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    Py_ssize_t left = view.len;
    long long total = 0;
    while (left >= 61) {
        int64_t size = 12 + (int64_t)(((uint32_t)p[8] << 24) | ((uint32_t)p[9] << 16) |
                                      ((uint32_t)p[10] << 8) | (uint32_t)p[11]);
        if (size < 61 || size > left || p[16] != 2)
            break;
        if (!(p[22] & 0x20))  /* attributes bit 5: control batch */
            total += (int32_t)(((uint32_t)p[57] << 24) | ((uint32_t)p[58] << 16) |
                               ((uint32_t)p[59] << 8) | (uint32_t)p[60]);
        p += size;
        left -= size;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(total);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk whole v2 records in a window (see protocol/validator.py)."},
    {"data_records", data_records, METH_O,
     "Records in the whole non-control v2 batches at the start of a buffer."},
    {"spans", spans, METH_VARARGS, "The records of decompressed records data as spans (the cleaner)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "semel.protocol._recordwalk",
    "C record walker for protocol.validator (optional accelerator).", -1, methods,
};

PyMODINIT_FUNC
PyInit__recordwalk(void)
{
    return PyModule_Create(&module);
}
