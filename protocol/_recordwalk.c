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
 *
 * Also the rest of a Produce request's fixed protocol work, each the C twin of a Python
 * function that stays the reference (tests/protocol/test_produce_fast_differential.py feeds
 * both the same valid, truncated, mutated and hostile inputs): produce_parse
 * (produce_fast.parse), batch_header and the header_* getters (records.BatchHeader),
 * valid_client_batch (records.is_valid_client_batch, with the CRC32C summed here for small
 * batches) and quick_summary (validator.quick_summary of an uncompressed CreateTime batch).
 * Each hands anything it cannot answer exactly like Python (integers past int64, batches
 * outside the buffer) to the Python version or answers it the same way.
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

/* ---- the produce fast path: the request's shape, the batch header, its checks ---------- */

/*
 * produce_parse(ParsedProduce, Topic, Partition, frame, version) -> ParsedProduce | None
 *
 * protocol/produce_fast.py _parse in one call, with the same answers: the request in `frame`
 * (header included, size prefix not) as the given tuple subclasses, the records views into
 * the frame; None for anything else (a tagged field, a negative count or length, a length
 * past the frame, a varint over 5 bytes, invalid UTF-8, trailing bytes). Never raises for
 * any bytes (only MemoryError, or a TypeError for a frame without the buffer protocol).
 */
typedef struct {
    const uint8_t *buf;
    Py_ssize_t pos, end;
    int bad; /* the frame does not have the common shape */
} frame_reader;

static int64_t
fr_int(frame_reader *r, int width)
{
    if (r->bad || r->end - r->pos < width) {
        r->bad = 1;
        return 0;
    }
    const uint8_t *p = r->buf + r->pos;
    uint64_t u = 0;
    for (int i = 0; i < width; i++)
        u = (u << 8) | p[i];
    r->pos += width;
    if (width == 2)
        return (int16_t)u;
    if (width == 4)
        return (int32_t)u;
    return (int64_t)u;
}

/* produce_fast._uvarint: at most 5 bytes (an unsigned value below 2^35) */
static int64_t
fr_uvarint(frame_reader *r)
{
    uint64_t value = 0;
    if (r->bad)
        return 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (r->pos >= r->end) {
            r->bad = 1;
            return 0;
        }
        uint8_t b = r->buf[r->pos++];
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            return (int64_t)value;
    }
    r->bad = 1;
    return 0;
}

/* a compact (flexible) or int16 length */
static int64_t
fr_length(frame_reader *r, int flexible, int width)
{
    return flexible ? fr_uvarint(r) - 1 : fr_int(r, width);
}

static void
fr_no_tags(frame_reader *r)
{
    if (r->bad || r->pos >= r->end || r->buf[r->pos] != 0)
        r->bad = 1;
    else
        r->pos++;
}

/* UTF-8 string of `length` bytes (>= 0), or NULL with r->bad (or an error set) */
static PyObject *
fr_string(frame_reader *r, int64_t length)
{
    if (r->bad || length < 0 || length > r->end - r->pos) {
        r->bad = 1;
        return NULL;
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->buf + r->pos, (Py_ssize_t)length, NULL);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        r->bad = 1;
        return NULL;
    }
    r->pos += (Py_ssize_t)length;
    return s;
}

/* an instance of tuple subclass `type` holding `n` new references (stolen) */
static PyObject *
new_record(PyTypeObject *type, Py_ssize_t n, PyObject **items)
{
    PyObject *t = type->tp_alloc(type, n);
    if (t == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

static int
is_tuple_type(PyObject *o)
{
    return PyType_Check(o) && PyType_IsSubtype((PyTypeObject *)o, &PyTuple_Type);
}

static PyObject *
produce_parse(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !is_tuple_type(args[0]) || !is_tuple_type(args[1]) ||
        !is_tuple_type(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "produce_parse(ParsedProduce, Topic, Partition, frame, version)");
        return NULL;
    }
    PyTypeObject *parsed_type = (PyTypeObject *)args[0], *topic_type = (PyTypeObject *)args[1],
                 *partition_type = (PyTypeObject *)args[2];
    PyObject *frame = args[3];
    long version = PyLong_AsLong(args[4]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    frame_reader r = {(const uint8_t *)view.buf, 8, view.len, 0};
    int flexible = version >= 9;
    PyObject *transactional_id = NULL, *topics = NULL, *result = NULL;

    int64_t client_id_length = fr_int(&r, 2);
    r.pos = 10 + (client_id_length > 0 ? client_id_length : 0);
    if (flexible)
        fr_no_tags(&r);
    int64_t length = fr_length(&r, flexible, 2);
    if (r.bad)
        goto done;
    if (length >= 0) {
        transactional_id = fr_string(&r, length);
        if (transactional_id == NULL)
            goto done;
    } else {
        transactional_id = Py_NewRef(Py_None);
    }
    int64_t acks = fr_int(&r, 2);
    int64_t timeout_ms = fr_int(&r, 4);
    int64_t count = fr_length(&r, flexible, 4);
    if (r.bad || count < 0)
        goto done;
    topics = PyList_New(0);
    if (topics == NULL)
        goto done;
    for (int64_t t = 0; t < count; t++) {
        PyObject *name = fr_string(&r, fr_length(&r, flexible, 2));
        if (name == NULL)
            goto done;
        int64_t partition_count = fr_length(&r, flexible, 4);
        PyObject *partitions = (r.bad || partition_count < 0) ? NULL : PyList_New(0);
        if (partitions == NULL) {
            r.bad = 1;
            Py_DECREF(name);
            goto done;
        }
        PyObject *items[2] = {name, partitions};
        PyObject *topic = new_record(topic_type, 2, items);
        if (topic == NULL)
            goto done;
        int appended = PyList_Append(topics, topic);
        Py_DECREF(topic);
        if (appended < 0)
            goto done;
        for (int64_t p = 0; p < partition_count; p++) {
            int64_t index = fr_int(&r, 4);
            int64_t size = fr_length(&r, flexible, 4);
            if (r.bad || size < 0 || size > r.end - r.pos) {
                r.bad = 1;
                goto done;
            }
            PyObject *part[2] = {
                PyLong_FromLongLong(index),
                PySequence_GetSlice(frame, r.pos, r.pos + (Py_ssize_t)size),
            };
            if (part[0] == NULL || part[1] == NULL) {
                Py_XDECREF(part[0]);
                Py_XDECREF(part[1]);
                goto done;
            }
            PyObject *partition = new_record(partition_type, 2, part);
            if (partition == NULL)
                goto done;
            appended = PyList_Append(partitions, partition);
            Py_DECREF(partition);
            if (appended < 0)
                goto done;
            r.pos += (Py_ssize_t)size;
            if (flexible)
                fr_no_tags(&r);
            if (r.bad)
                goto done;
        }
        if (flexible)
            fr_no_tags(&r);
        if (r.bad)
            goto done;
    }
    if (flexible)
        fr_no_tags(&r);
    if (r.bad || r.pos != r.end) {
        r.bad = 1;
        goto done;
    }
    {
        PyObject *items[4] = {transactional_id, PyLong_FromLongLong(acks),
                              PyLong_FromLongLong(timeout_ms), topics};
        transactional_id = topics = NULL;
        if (items[1] == NULL || items[2] == NULL) {
            for (int i = 0; i < 4; i++)
                Py_XDECREF(items[i]);
            goto done;
        }
        result = new_record(parsed_type, 4, items);
    }
done:
    PyBuffer_Release(&view);
    Py_XDECREF(transactional_id);
    Py_XDECREF(topics);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* the 61-byte v2 batch header (protocol/records.py _FIELDS), big-endian */
#define BATCH_HEADER_SIZE 61

static inline uint64_t
be(const uint8_t *p, int width)
{
    uint64_t u = 0;
    for (int k = 0; k < width; k++)
        u = (u << 8) | p[k];
    return u;
}

/* the 13 fields of the header at p */
static void
header_fields_at(const uint8_t *p, int64_t *f)
{
    f[0] = (int64_t)be(p, 8);
    f[1] = (int32_t)be(p + 8, 4);
    f[2] = (int32_t)be(p + 12, 4);
    f[3] = (int8_t)p[16];
    f[4] = (int64_t)be(p + 17, 4); /* crc: uint32 */
    f[5] = (int16_t)be(p + 21, 2);
    f[6] = (int32_t)be(p + 23, 4);
    f[7] = (int64_t)be(p + 27, 8);
    f[8] = (int64_t)be(p + 35, 8);
    f[9] = (int64_t)be(p + 43, 8);
    f[10] = (int16_t)be(p + 51, 2);
    f[11] = (int32_t)be(p + 53, 4);
    f[12] = (int32_t)be(p + 57, 4);
}

/*
 * batch_header(cls, buf, position=0) -> cls: protocol.records.BatchHeader.__new__, the 13
 * header fields and `position` in one tuple subclass instance. A header that does not fit
 * (struct.unpack_from's rule, negative positions counting from the end) calls
 * cls._truncated(buf, position), which raises CorruptRecordError.
 */
static PyObject *
batch_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 3 || !is_tuple_type(args[0])) {
        PyErr_SetString(PyExc_TypeError, "batch_header(cls, buf, position=0)");
        return NULL;
    }
    PyObject *position = nargs == 3 ? args[2] : NULL;
    Py_ssize_t pos = 0;
    if (position != NULL) {
        pos = PyNumber_AsSsize_t(position, PyExc_OverflowError);
        if (pos == -1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t at = pos;
    int fits;
    if (pos < 0) {
        fits = pos + BATCH_HEADER_SIZE <= 0 && pos + view.len >= 0;
        at = pos + view.len;
    } else {
        fits = view.len - pos >= BATCH_HEADER_SIZE;
    }
    if (!fits) {
        PyBuffer_Release(&view);
        PyObject *zero = NULL;
        if (position == NULL && (zero = PyLong_FromLong(0)) == NULL)
            return NULL;
        PyObject *r = PyObject_CallMethod(args[0], "_truncated", "OO", args[1],
                                          position != NULL ? position : zero);
        Py_XDECREF(zero);
        if (r != NULL) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_SystemError, "_truncated did not raise");
        }
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *header = type->tp_alloc(type, 14);
    if (header == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t fields[13];
    header_fields_at((const uint8_t *)view.buf + at, fields);
    PyBuffer_Release(&view);
    for (int i = 0; i < 13; i++) {
        PyObject *value = PyLong_FromLongLong(fields[i]);
        if (value == NULL) {
            Py_DECREF(header);
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, value);
    }
    PyTuple_SET_ITEM(header, 13, position != NULL ? Py_NewRef(position) : PyLong_FromLong(0));
    if (PyTuple_GET_ITEM(header, 13) == NULL) {
        Py_DECREF(header);
        return NULL;
    }
    return header;
}

enum {
    H_BASE_OFFSET, H_BATCH_LENGTH, H_LEADER_EPOCH, H_MAGIC, H_CRC, H_ATTRIBUTES,
    H_LAST_OFFSET_DELTA, H_BASE_TIMESTAMP, H_MAX_TIMESTAMP, H_PRODUCER_ID, H_PRODUCER_EPOCH,
    H_BASE_SEQUENCE, H_RECORD_COUNT, H_POSITION,
};

/* header item i as an int64 (the header is a BatchHeader: a tuple of 14 ints) */
static int
header_item(PyObject *header, int i, int64_t *out)
{
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(header, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* the header items in `mask` (bit i: item i) as int64s; the header is a BatchHeader, a
   tuple of 14 ints (items that do not fit raise OverflowError) */
static int
header_items(PyObject *header, int64_t *h, unsigned mask)
{
    if (!PyTuple_Check(header) || PyTuple_GET_SIZE(header) != 14) {
        PyErr_SetString(PyExc_TypeError, "header must be a BatchHeader");
        return -1;
    }
    for (int i = 0; i < 14; i++)
        if (mask & (1u << i) && header_item(header, i, &h[i]) < 0)
            return -1;
    return 0;
}


static PyObject *crc32c_function; /* crc32c.crc32c, imported at the first CRC */

/*
 * CRC-32C (Castagnoli) of a region, the crc32c package's answer. Regions up to
 * INLINE_CRC_MAX bytes on an x86-64 CPU with SSE 4.2 are summed here with its crc32
 * instruction (one call of the package costs more than the sum of a small batch);
 * anything else, and every other CPU or compiler, calls the package, whose 3-way
 * interleaved sum is faster on large regions. Returns 0 and the CRC in *out, or -1 with
 * an exception.
 */
#define INLINE_CRC_MAX 768 /* measured: the package is faster from about 1 KiB */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#include <string.h>
#define HAVE_INLINE_CRC 1
__attribute__((target("sse4.2"))) static uint32_t
crc32c_sse42(const uint8_t *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n-- > 0)
        c = _mm_crc32_u8(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
static int inline_crc = -1; /* unknown yet | 0 | 1: the CPU has SSE 4.2 */
#endif

static int
region_crc32c(const uint8_t *p, Py_ssize_t n, uint32_t *out)
{
#ifdef HAVE_INLINE_CRC
    if (inline_crc < 0) {
        __builtin_cpu_init();
        inline_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (inline_crc && n <= INLINE_CRC_MAX) {
        *out = crc32c_sse42(p, (size_t)n);
        return 0;
    }
#endif
    if (crc32c_function == NULL) {
        PyObject *crc_module = PyImport_ImportModule("crc32c");
        if (crc_module == NULL)
            return -1;
        crc32c_function = PyObject_GetAttrString(crc_module, "crc32c");
        Py_DECREF(crc_module);
        if (crc32c_function == NULL)
            return -1;
    }
    /* the region, lent for the call only (the caller's buffer export keeps it alive) */
    PyObject *region = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    PyObject *crc = region == NULL ? NULL : PyObject_CallOneArg(crc32c_function, region);
    Py_XDECREF(region);
    if (crc == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint32_t)value;
    return 0;
}

/*
 * crc32c(data) -> int: region_crc32c of a buffer (the differential tests compare it with the
 * crc32c package at every length around INLINE_CRC_MAX).
 */
static PyObject *
crc32c_of(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    uint32_t crc;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int r = region_crc32c((const uint8_t *)view.buf, view.len, &crc);
    PyBuffer_Release(&view);
    return r < 0 ? NULL : PyLong_FromUnsignedLong(crc);
}

/*
 * valid_client_batch(view, header) -> bool: protocol.records.is_valid_client_batch (view
 * is exactly one batch, header read at its start, passing every check of a client's batch,
 * the CRC32C by the crc32c package as in Python).
 */
static PyObject *
valid_client_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t h[14];
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "valid_client_batch(view, header)");
        return NULL;
    }
    if (header_items(args[1], h, (1u << H_BATCH_LENGTH) | (1u << H_MAGIC) | (1u << H_CRC) |
                     (1u << H_ATTRIBUTES) | (1u << H_LAST_OFFSET_DELTA) |
                     (1u << H_PRODUCER_ID) | (1u << H_BASE_SEQUENCE) |
                     (1u << H_RECORD_COUNT) | (1u << H_POSITION)) < 0)
        return NULL;
    Py_ssize_t size = PyObject_Length(args[0]);
    if (size < 0)
        return NULL;
    int64_t attributes = h[H_ATTRIBUTES], count = h[H_RECORD_COUNT];
    if (!(h[H_POSITION] == 0 && h[H_MAGIC] == 2 && h[H_BATCH_LENGTH] >= BATCH_HEADER_SIZE - 12 &&
          h[H_BATCH_LENGTH] + 12 == size && (attributes & 7) <= 4 && !(attributes & 0x20) &&
          count > 0 && count == h[H_LAST_OFFSET_DELTA] + 1 &&
          (h[H_PRODUCER_ID] <= -1 || h[H_BASE_SEQUENCE] >= 0)))
        Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len != size) { /* not a byte buffer */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "valid_client_batch: view must be a byte buffer");
        return NULL;
    }
    uint32_t computed;
    int r = region_crc32c((const uint8_t *)view.buf + 21, view.len - 21, &computed);
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    return PyBool_FromLong((int64_t)computed == h[H_CRC]);
}

/*
 * BatchHeader's computed properties (protocol/records.py), as C getters: the produce path
 * reads several per request, and a property whose getter is a Python function costs a
 * frame each. Each reads the header's items as C integers when they fit (every
 * BatchHeader's do: they come from the 61 bytes) and otherwise calls the Python getter
 * (type(self)._<name>_py), so any tuple gets the Python answer.
 */
static int
small_item(PyObject *self, int i, int64_t *out)
{
    if (!PyTuple_Check(self) || PyTuple_GET_SIZE(self) <= i)
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(self, i), &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (overflow || v > ((int64_t)1 << 40) || v < -((int64_t)1 << 40))
        return 0;
    *out = v;
    return 1;
}

static PyObject *
python_getter(PyObject *self, const char *name)
{
    PyObject *getter = PyObject_GetAttrString((PyObject *)Py_TYPE(self), name);
    if (getter == NULL)
        return NULL;
    PyObject *r = PyObject_CallOneArg(getter, self);
    Py_DECREF(getter);
    return r;
}

static PyObject *
header_compression(PyObject *module, PyObject *self)
{
    int64_t a;
    if (!small_item(self, H_ATTRIBUTES, &a))
        return python_getter(self, "_compression_py");
    return PyLong_FromLong((long)(a & 7));
}

static PyObject *
header_timestamp_type(PyObject *module, PyObject *self)
{
    int64_t a;
    if (!small_item(self, H_ATTRIBUTES, &a))
        return python_getter(self, "_timestamp_type_py");
    return PyLong_FromLong((long)((a & 8) >> 3));
}

static PyObject *
header_is_transactional(PyObject *module, PyObject *self)
{
    int64_t a;
    if (!small_item(self, H_ATTRIBUTES, &a))
        return python_getter(self, "_is_transactional_py");
    return PyBool_FromLong((long)(a & 0x10));
}

static PyObject *
header_size(PyObject *module, PyObject *self)
{
    int64_t length;
    if (!small_item(self, H_BATCH_LENGTH, &length))
        return python_getter(self, "_size_py");
    return PyLong_FromLongLong(length + 12);
}

static PyObject *
header_last_sequence(PyObject *module, PyObject *self)
{
    int64_t base, delta;
    if (!small_item(self, H_BASE_SEQUENCE, &base) ||
        !small_item(self, H_LAST_OFFSET_DELTA, &delta))
        return python_getter(self, "_last_sequence_py");
    const int64_t int32_max = 2147483647;
    if (base == -1)
        return PyLong_FromLong(-1);
    if (base > int32_max - delta) /* wraps past 2^31-1 to 0, as Kafka does */
        return PyLong_FromLongLong(delta - (int32_max - base) - 1);
    return PyLong_FromLongLong(base + delta);
}

/* a - b clamped to int64; *dir: 1 above INT64_MAX, -1 below INT64_MIN, else 0 */
static int64_t
saturating_sub(int64_t a, int64_t b, int *dir)
{
    *dir = 0;
    if (b < 0 && a > INT64_MAX + b) {
        *dir = 1;
        return INT64_MAX;
    }
    if (b > 0 && a < INT64_MIN + b) {
        *dir = -1;
        return INT64_MIN;
    }
    return a - b;
}

/* a + b clamped to int64; *dir as saturating_sub */
static int64_t
saturating_add(int64_t a, int64_t b, int *dir)
{
    *dir = 0;
    if (b > 0 && a > INT64_MAX - b) {
        *dir = 1;
        return INT64_MAX;
    }
    if (b < 0 && a < INT64_MIN - b) {
        *dir = -1;
        return INT64_MIN;
    }
    return a + b;
}

/*
 * quick_core(buf, header, require_keys, bounds, RecordsSummary) -> RecordsSummary | None |
 * False
 *
 * protocol.validator.quick_summary for an uncompressed CreateTime batch on a CreateTime topic
 * (the caller checks those): validator._timestamp_rule and one walk of the records in place,
 * the summary when nothing is wrong, None when the full walk must look. False where Python's
 * unbounded integers could answer otherwise (a bound, the largest timestamp or a header item
 * past int64) and for a header whose batch does not lie within buf (never one that passed the header
 * checks): the caller then runs the Python version.
 */
static PyObject *
quick_core(PyObject *buf, PyObject *header, PyObject *keys, PyObject *bounds, PyObject *type)
{
    int64_t h[14];
    if (header_items(header, h, (1u << H_BATCH_LENGTH) | (1u << H_BASE_TIMESTAMP) |
                     (1u << H_RECORD_COUNT) | (1u << H_POSITION)) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int require_keys = PyObject_IsTrue(keys);
    if (require_keys < 0)
        return NULL;
    if (h[H_POSITION] < 0) /* counts from the end in Python */
        Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int64_t start = h[H_POSITION] + BATCH_HEADER_SIZE;
    int64_t end = h[H_POSITION] + h[H_BATCH_LENGTH] + 12;
    if (end > view.len) { /* not a checked batch (the header checks refuse it first) */
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    if (start >= end) {
        /* a length below a header's (the header checks refuse it first): Python's walk
           ends where it starts, so only a header declaring no records and no bytes has a
           summary, whose timestamp is max(-1, base + INT64_MIN) = -1 */
        PyBuffer_Release(&view);
        if (start != end || h[H_RECORD_COUNT] != 0)
            Py_RETURN_NONE;
        PyObject *items[3] = {PyLong_FromLong(-1), PyLong_FromLong(0), PyLong_FromLong(0)};
        return new_record((PyTypeObject *)type, 3, items);
    }
    int64_t base = h[H_BASE_TIMESTAMP];
    walk_state s;
    s.mode = TS_NONE;
    s.dlow = INT64_MIN;
    s.dhigh = INT64_MAX;
    if (bounds != Py_None) {
        int over_low = 0, over_high = 0, dir_low, dir_high;
        long long low = 0, high = 0;
        if (PyTuple_Check(bounds) && PyTuple_GET_SIZE(bounds) == 2) {
            low = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(bounds, 0), &over_low);
            if (!(low == -1 && PyErr_Occurred()))
                high = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(bounds, 1), &over_high);
            if (PyErr_Occurred()) {
                PyBuffer_Release(&view);
                return NULL;
            }
        } else {
            over_low = 1; /* not a pair of ints: Python's answer */
        }
        /* _timestamp_rule: max(low, INT64_MIN) - base, min(high, INT64_MAX) - base; a
           low bound above int64 or a high one below it: Python's arithmetic decides */
        if (over_low > 0 || over_high < 0) {
            PyBuffer_Release(&view);
            Py_RETURN_FALSE;
        }
        if (over_low < 0)
            low = INT64_MIN;
        if (over_high > 0)
            high = INT64_MAX;
        s.mode = TS_RANGE;
        s.dlow = saturating_sub(low, base, &dir_low);
        s.dhigh = saturating_sub(high, base, &dir_high);
        if (dir_low > 0 || dir_high < 0) { /* an empty range */
            s.dlow = INT64_MAX;
            s.dhigh = INT64_MIN;
        }
    }
    s.base = (const uint8_t *)view.buf;
    s.pos = (Py_ssize_t)start;
    s.end = (Py_ssize_t)end;
    s.index = 0;
    s.count = h[H_RECORD_COUNT];
    s.none_delta = -1 - base;
    s.max_delta = INT64_MIN;
    s.require_keys = require_keys;
    s.room = 0;
    s.errors = NULL;
    if (s.end - s.pos >= NOGIL_THRESHOLD) {
        Py_BEGIN_ALLOW_THREADS
        walk_records(&s);
        Py_END_ALLOW_THREADS
    } else {
        walk_records(&s);
    }
    PyBuffer_Release(&view);
    if (s.status != DONE || s.found || s.pos != s.end || s.index != s.count)
        Py_RETURN_NONE;
    /* max(-1, base + max_delta); no record: max_delta is INT64_MIN */
    int dir;
    int64_t max_timestamp = saturating_add(base, s.max_delta, &dir);
    if (dir > 0)
        Py_RETURN_FALSE;
    if (dir < 0 || max_timestamp < -1)
        max_timestamp = -1;
    PyObject *items[3] = {PyLong_FromLongLong(max_timestamp), PyLong_FromLongLong(s.count),
                          PyLong_FromSsize_t(s.end - (Py_ssize_t)start)};
    if (items[0] == NULL || items[1] == NULL || items[2] == NULL) {
        for (int i = 0; i < 3; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    return new_record((PyTypeObject *)type, 3, items);
}

static PyObject *kw_require_keys, *kw_timestamp_bounds, *kw_log_append_time,
    *kw_max_uncompressed; /* interned keyword names */

/*
 * quick_summary(fallback, RecordsSummary, buf, header, *, require_keys=False,
 *               timestamp_bounds=None, log_append_time=False, max_uncompressed=...)
 *
 * protocol.validator.quick_summary with the same arguments (validator binds the first two):
 * an uncompressed CreateTime batch on a CreateTime topic is quick_core's; anything else, and
 * whatever quick_core hands back (False), is fallback's (the pure-Python quick_summary),
 * called with the arguments as given.
 */
static PyObject *
quick_summary(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs < 2 || !is_tuple_type(args[1])) {
        PyErr_SetString(PyExc_TypeError, "quick_summary(fallback, RecordsSummary, buf, header, ...)");
        return NULL;
    }
    PyObject *keys = Py_False, *bounds = Py_None, *log_append_time = Py_False;
    int plain = nargs == 4;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw && plain; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (name == kw_require_keys)
            keys = value;
        else if (name == kw_timestamp_bounds)
            bounds = value;
        else if (name == kw_log_append_time)
            log_append_time = value;
        else if (name != kw_max_uncompressed) /* (not interned, or unknown: Python's) */
            plain = 0;
    }
    if (plain) {
        PyObject *header = args[3];
        plain = PyTuple_Check(header) && PyTuple_GET_SIZE(header) == 14 &&
                PyLong_CheckExact(PyTuple_GET_ITEM(header, 5));
        if (plain) {
            long attributes = PyLong_AsLong(PyTuple_GET_ITEM(header, 5));
            if (attributes == -1 && PyErr_Occurred())
                PyErr_Clear();
            int lat = PyObject_IsTrue(log_append_time);
            if (lat < 0)
                return NULL;
            plain = !(attributes & 0x0F) && !lat; /* uncompressed, CreateTime, on both */
        }
    }
    if (plain) {
        PyObject *summary = quick_core(args[2], args[3], keys, bounds, args[1]);
        if (summary != Py_False)
            return summary;
        Py_DECREF(summary);
    }
    return PyObject_Vectorcall(args[0], args + 2, nargs - 2, kwnames);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk whole v2 records in a window (see protocol/validator.py)."},
    {"data_records", data_records, METH_O,
     "Records in the whole non-control v2 batches at the start of a buffer."},
    {"spans", spans, METH_VARARGS, "The records of decompressed records data as spans (the cleaner)."},
    {"produce_parse", (PyCFunction)(void (*)(void))produce_parse, METH_FASTCALL,
     "A Produce request of the common shape (see protocol/produce_fast.py)."},
    {"batch_header", (PyCFunction)(void (*)(void))batch_header, METH_FASTCALL,
     "BatchHeader.__new__ (see protocol/records.py)."},
    {"valid_client_batch", (PyCFunction)(void (*)(void))valid_client_batch, METH_FASTCALL,
     "is_valid_client_batch (see protocol/records.py)."},
    {"quick_summary", (PyCFunction)(void (*)(void))quick_summary,
     METH_FASTCALL | METH_KEYWORDS, "validator.quick_summary (see protocol/validator.py)."},
    {"crc32c", crc32c_of, METH_O, "CRC-32C of a buffer, as the crc32c package's."},
    {"header_compression", header_compression, METH_O, "BatchHeader.compression"},
    {"header_timestamp_type", header_timestamp_type, METH_O, "BatchHeader.timestamp_type"},
    {"header_is_transactional", header_is_transactional, METH_O, "BatchHeader.is_transactional"},
    {"header_size", header_size, METH_O, "BatchHeader.size"},
    {"header_last_sequence", header_last_sequence, METH_O, "BatchHeader.last_sequence"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "semel.protocol._recordwalk",
    "C record walker for protocol.validator (optional accelerator).", -1, methods,
};

PyMODINIT_FUNC
PyInit__recordwalk(void)
{
    kw_require_keys = PyUnicode_InternFromString("require_keys");
    kw_timestamp_bounds = PyUnicode_InternFromString("timestamp_bounds");
    kw_log_append_time = PyUnicode_InternFromString("log_append_time");
    kw_max_uncompressed = PyUnicode_InternFromString("max_uncompressed");
    if (kw_require_keys == NULL || kw_timestamp_bounds == NULL || kw_log_append_time == NULL ||
        kw_max_uncompressed == NULL)
        return NULL;
    return PyModule_Create(&module);
}
