/* The stored records a reader makes from a client's batch (docs/decisions/2026-11-29-compiled-hot-paths.md).
 *
 * The twin is store/message.py's py_encode_batch_records, which also says what is wrong with a
 * batch: this function takes only a batch that parses and whose sizes RocketMQ accepts, and
 * answers None for any other, which the twin then reads from the start.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#define BATCH_HEAD 20                  /* totalSize, magic, bodyCRC, flag, bodyLen: five i32 */
#define BODY_CRC_MASK 0x7FFFFFFF

static inline unsigned char *wr32(unsigned char *p, uint32_t v) {
    put_be32(p, (int32_t)v);
    return p + 4;
}

static inline unsigned char *put(unsigned char *o, const void *src, Py_ssize_t n) {
    memcpy(o, src, (size_t)n);
    return o + n;
}

/* The body's CRC as the twin takes it: crc(body) & 0x7FFFFFFF (crc: zlib's CRC-32, as isal's). */
static int body_crc(PyObject *crc, const unsigned char *body, Py_ssize_t n, uint32_t *out) {
    PyObject *view = PyMemoryView_FromMemory((char *)body, n, PyBUF_READ);
    if (!view)
        return 0;
    PyObject *v = PyObject_CallOneArg(crc, view);
    Py_DECREF(view);
    if (!v)
        return 0;
    unsigned long c = PyLong_AsUnsignedLongMask(v);
    Py_DECREF(v);
    if (c == (unsigned long)-1 && PyErr_Occurred())
        return 0;
    *out = (uint32_t)(c & BODY_CRC_MASK);
    return 1;
}

/* batch_records(batch, plain, with_sep, max_body, props_max, lead, rest, topic, queue_id, born_ts,
 *               fixed, crc) -> (sizes, records) or None
 *
 * Each message of a SEND_BATCH_MESSAGE body ([i32 total][i32 magic][i32 crc][i32 flag][i32 bodyLen]
 * body [i16 propsLen] props) as a stored record: the template's header (``lead`` between FLAG and
 * BORNTIMESTAMP, ``rest`` between it and BODYLEN), the body, the topic, its properties then
 * ``plain`` (or ``with_sep`` when they do not end with a separator).  ``records``: all of them,
 * one after another. */
PyObject *rbx_batch_records(PyObject *self, PyObject *args) {
    Py_buffer b, plain, sep, lead, rest, topic;
    Py_ssize_t max_body, props_max, fixed;
    int queue_id;
    long long born_ts;
    PyObject *crc, *sizes = NULL, *records = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*nny*y*y*iLnO", &b, &plain, &sep, &max_body, &props_max, &lead, &rest, &topic,
                          &queue_id, &born_ts, &fixed, &crc))
        return NULL;
    const unsigned char *in = b.buf;
    Py_ssize_t n = b.len, at = 0, total = 0, bodies = 0, count = 0;
    int fits = topic.len <= 255 && (Py_ssize_t)BATCH_HEAD + lead.len + 8 + rest.len + 4 + 1 + topic.len + 2 == fixed;
    /* pass 1: every message parses and is of a size RocketMQ takes, or the twin decides */
    while (fits && at < n) {
        if (at + BATCH_HEAD + 2 > n)
            fits = 0;
        else {
            int32_t size = be32(in + at), blen = be32(in + at + 16);
            Py_ssize_t end_body = at + BATCH_HEAD + blen;
            if (blen < 0 || blen > max_body || end_body + 2 > n) {
                fits = 0;
                break;
            }
            int16_t plen = (int16_t)((in[end_body] << 8) | in[end_body + 1]);
            Py_ssize_t end = end_body + 2 + plen;
            if (plen < 0 || end > n || size != end - at) {
                fits = 0;
                break;
            }
            Py_ssize_t more = plen && plain.len ? (in[end - 1] == 2 ? plain.len : sep.len) : plain.len;
            if (plen + more > props_max) {
                fits = 0;
                break;
            }
            bodies += blen, count++, total += fixed + blen + plen + more, at = end;
        }
    }
    if (!fits || count == 0 || bodies > max_body) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    sizes = PyList_New(count);
    records = PyBytes_FromStringAndSize(NULL, total);
    if (!sizes || !records)
        goto done;
    /* pass 2: the records */
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(records);
    at = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t flag = be32(in + at + 12), blen = be32(in + at + 16);
        const unsigned char *body = in + at + BATCH_HEAD;
        Py_ssize_t end_body = at + BATCH_HEAD + blen;
        int16_t plen = (int16_t)((in[end_body] << 8) | in[end_body + 1]);
        Py_ssize_t end = end_body + 2 + plen;
        const Py_buffer *more = plen && plain.len ? (in[end - 1] == 2 ? &plain : &sep) : &plain;
        Py_ssize_t props_len = plen + more->len, size = fixed + blen + props_len;
        uint32_t c;
        if (!body_crc(crc, body, blen, &c))
            goto done;
        PyObject *sz = PyLong_FromSsize_t(size);
        if (!sz)
            goto done;
        PyList_SET_ITEM(sizes, i, sz);
        o = wr32(o, (uint32_t)size);
        o = wr32(o, (uint32_t)MAGIC);
        o = wr32(o, c);
        o = wr32(o, (uint32_t)queue_id);
        o = wr32(o, (uint32_t)flag);
        o = put(o, lead.buf, lead.len);
        o = wr32(o, (uint32_t)((unsigned long long)born_ts >> 32));
        o = wr32(o, (uint32_t)born_ts);
        o = put(o, rest.buf, rest.len);
        o = wr32(o, (uint32_t)blen);
        o = put(o, body, blen);
        *o++ = (unsigned char)topic.len;
        o = put(o, topic.buf, topic.len);
        *o++ = (unsigned char)(props_len >> 8), *o++ = (unsigned char)props_len;
        o = put(o, in + end_body + 2, plen);
        o = put(o, more->buf, more->len);
        at = end;
    }
    out = PyTuple_Pack(2, sizes, records);
done:
    Py_XDECREF(sizes);
    Py_XDECREF(records);
    PyBuffer_Release(&b);
    PyBuffer_Release(&plain);
    PyBuffer_Release(&sep);
    PyBuffer_Release(&lead);
    PyBuffer_Release(&rest);
    PyBuffer_Release(&topic);
    return out;
}
