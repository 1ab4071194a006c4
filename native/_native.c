/* rocketbox's compiled hot paths (docs/decisions/2026-11-29-compiled-hot-paths.md).
 *
 * Each function here has a pure-Python twin in the module that uses it, which produces the same
 * results; ``native/__init__.py`` picks one at import (ROCKETBOX_PURE_PYTHON=1 forces Python),
 * and tests/unit/native feeds both the same generated inputs.  Only loops live here: no state,
 * no I/O, no policy.  Integers are CommitLog big-endian, as store/message.py declares them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

/* records(buf, at, stop, limit, file_size, min_size) -> (starts, sizes, end, bad)
 *
 * The records of one CommitLog file's bytes ``buf`` from ``at`` (a record boundary): each starts
 * with [i32 total][i32 MAGIC]; a BLANK filler ends the file's records (``end`` = file_size when
 * the filler's header is below ``stop``).  A record must end by ``stop``; the walk stops at
 * ``limit``.  ``bad``: where a header that is neither, a size below ``min_size``, or a record or
 * header across the file's end was met, else -1.  (dispatcher/service.py's pass: ``store/walk.records`` is the Python twin.) */
static PyObject *records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at, stop, limit, fsize, min_size;
    if (!PyArg_ParseTuple(args, "y*nnnnn", &view, &at, &stop, &limit, &fsize, &min_size))
        return NULL;
    PyObject *starts = PyList_New(0), *sizes = PyList_New(0), *out = NULL;
    Py_ssize_t bad = -1;
    if (!starts || !sizes)
        goto done;
    if (limit > view.len) {
        PyErr_SetString(PyExc_ValueError, "limit past the buffer");
        goto done;
    }
    const unsigned char *b = view.buf;
    while (at < limit) {
        if (at + 8 > stop)
            break;
        if (at + 8 > view.len) {             /* a header across the file's end */
            bad = at;
            break;
        }
        int32_t total = be32(b + at), magic = be32(b + at + 4);
        if (magic != MAGIC) {
            if (magic == BLANK_MAGIC) {
                if (fsize <= stop)
                    at = fsize;
            } else {
                bad = at;
            }
            break;
        }
        if (total < min_size || at + total > view.len) {
            bad = at;
            break;
        }
        if (at + total > stop)
            break;
        PyObject *s = PyLong_FromSsize_t(at), *n = PyLong_FromSsize_t(total);
        if (!s || !n || PyList_Append(starts, s) || PyList_Append(sizes, n)) {
            Py_XDECREF(s);
            Py_XDECREF(n);
            goto done;
        }
        Py_DECREF(s);
        Py_DECREF(n);
        at += total;
    }
    out = Py_BuildValue("OOnn", starts, sizes, at, bad);
done:
    Py_XDECREF(starts);
    Py_XDECREF(sizes);
    PyBuffer_Release(&view);
    return out;
}

/* headers(buf, skip, pos, file_size, min_size) -> (skip, bad)
 *
 * A CommitLog stream's record headers, checked as they arrive (a slave's check that its master
 * sends records: replicator/protocol.Records).  ``buf`` holds the stream from global offset
 * ``pos``; the next record starts ``skip`` bytes into it.  Each header must be a record (MAGIC,
 * ``min_size`` <= total <= the bytes left in its file) or a BLANK filler to its file's end.
 * -> where the next header starts, as bytes from ``buf``'s start (past its end when a record
 * runs on), and ``bad``: the global offset of a header that is neither, else -1. */
static PyObject *headers(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at, pos, fsize, min_size;
    if (!PyArg_ParseTuple(args, "y*nnnn", &view, &at, &pos, &fsize, &min_size))
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t bad = -1;
    while (at + 8 <= view.len) {
        int32_t total = be32(b + at), magic = be32(b + at + 4);
        Py_ssize_t left = fsize - (pos + at) % fsize;
        if ((magic == BLANK_MAGIC && total == left) || (magic == MAGIC && min_size <= total && total <= left)) {
            at += total;
            continue;
        }
        bad = pos + at;
        break;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nn", at, bad);
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4));
}

/* fields(buf, starts, out, layout) -> None
 *
 * The fixed fields of the records of one CommitLog file's bytes ``buf`` starting at each offset
 * of ``starts`` (native int64), into ``out`` (native int64, 8 rows of len(starts)): queue id,
 * queue offset, sysflag, store timestamp, where the topic's length byte is, the topic's length,
 * where the properties are and their length (a signed i16, as the record holds it).
 * ``layout``, from store/message.py (the record's layout is declared there alone): the offsets of
 * QUEUEID, QUEUEOFFSET, SYSFLAG and STORETIMESTAMP, the IPv4 header's size, what an IPv6 host
 * adds, and the sysflag bits of an IPv6 born and store host.  IndexError for a record whose
 * fields lie past ``buf`` (a damaged one: the dispatcher redoes the pass record by record).
 * (store/fields.py: ``py_fields`` is the Python twin.) */
static PyObject *fields(PyObject *self, PyObject *args) {
    Py_buffer view, starts, out;
    Py_ssize_t q_at, qoff_at, flag_at, ts_at, header_v4, v6_extra, born_v6, store_v6;
    if (!PyArg_ParseTuple(args, "y*y*w*(nnnnnnnn)", &view, &starts, &out, &q_at, &qoff_at, &flag_at, &ts_at,
                          &header_v4, &v6_extra, &born_v6, &store_v6))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / 8;
    if (starts.len % 8 || out.len < 8 * 8 * n) {
        PyErr_SetString(PyExc_ValueError, "starts must be int64 and out 8 rows of int64 as long");
        goto done;
    }
    const unsigned char *b = view.buf;
    const int64_t *at = starts.buf;
    int64_t *o = out.buf;
    Py_ssize_t len = view.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = at[i];
        if (s < 0 || s + header_v4 > len) {
            PyErr_Format(PyExc_IndexError, "the record at %lld lies past its file", (long long)s);
            goto done;
        }
        int64_t flag = be32(b + s + flag_at);
        int64_t born6 = (flag & born_v6) != 0, store6 = (flag & store_v6) != 0;
        int64_t header = header_v4 + v6_extra * (born6 + store6);
        if (s + header > len) {
            PyErr_Format(PyExc_IndexError, "the record at %lld lies past its file", (long long)s);
            goto done;
        }
        int64_t topic_at = s + header + be32(b + s + header - 4);
        if (topic_at < 0 || topic_at + 1 > len) {
            PyErr_Format(PyExc_IndexError, "the record at %lld: its topic lies past its file", (long long)s);
            goto done;
        }
        int64_t topic_len = b[topic_at];
        if (topic_at + 3 + topic_len > len) {
            PyErr_Format(PyExc_IndexError, "the record at %lld: its properties lie past its file", (long long)s);
            goto done;
        }
        o[i] = be32(b + s + q_at);
        o[n + i] = be64(b + s + qoff_at);
        o[2 * n + i] = flag;
        o[3 * n + i] = be64(b + s + ts_at + v6_extra * born6);
        o[4 * n + i] = topic_at;
        o[5 * n + i] = topic_len;
        o[6 * n + i] = topic_at + 3 + topic_len;
        o[7 * n + i] = (int16_t)(((uint16_t)b[topic_at + 1 + topic_len] << 8) | b[topic_at + 2 + topic_len]);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&out);
    return result;
}

/* groups(buf, topic_at, topic_len, queue_id, out) -> first
 *
 * The records' (topic, queue id) groups: ``out[i]`` (native int64) is record i's group, groups
 * numbered in the order of their first record; ``first`` lists each group's first record.  A
 * topic is ``topic_len[i]`` bytes at ``topic_at[i] + 1`` of ``buf`` (after its length byte),
 * compared byte for byte.  (store/fields.py: ``py_groups`` is the numpy twin.) */
static PyObject *groups(PyObject *self, PyObject *args) {
    Py_buffer view, t_at, t_len, qid, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &view, &t_at, &t_len, &qid, &out))
        return NULL;
    PyObject *first = NULL;
    int64_t *table = NULL;
    Py_ssize_t n = t_at.len / 8;
    if (t_at.len % 8 || t_len.len != t_at.len || qid.len != t_at.len || out.len < t_at.len) {
        PyErr_SetString(PyExc_ValueError, "topic_at, topic_len, queue_id and out must be int64 of one length");
        goto done;
    }
    const unsigned char *b = view.buf;
    const int64_t *at = t_at.buf, *len = t_len.buf, *q = qid.buf;
    int64_t *o = out.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || len[i] < 0 || at[i] + 1 + len[i] > view.len) {
            PyErr_Format(PyExc_IndexError, "record %zd's topic lies past its file", i);
            goto done;
        }
    }
    Py_ssize_t size = 16;
    while (size < 2 * n)
        size <<= 1;
    table = PyMem_Malloc(size * sizeof(int64_t));    /* each slot: a group's first record, or -1 */
    first = PyList_New(0);
    if (!table || !first) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < size; i++)
        table[i] = -1;
    int64_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *t = b + at[i] + 1;
        uint64_t h = 1469598103934665603ULL ^ (uint64_t)q[i];      /* FNV-1a over the queue id, then the topic */
        for (int64_t k = 0; k < len[i]; k++)
            h = (h ^ t[k]) * 1099511628211ULL;
        h ^= (uint64_t)len[i] * 0x9E3779B97F4A7C15ULL;
        Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(size - 1));
        for (;;) {
            int64_t r = table[slot];
            if (r < 0) {
                table[slot] = i;
                o[i] = count++;
                PyObject *v = PyLong_FromSsize_t(i);
                if (!v || PyList_Append(first, v)) {
                    Py_XDECREF(v);
                    Py_CLEAR(first);
                    goto done;
                }
                Py_DECREF(v);
                break;
            }
            if (q[r] == q[i] && len[r] == len[i] && memcmp(b + at[r] + 1, t, (size_t)len[i]) == 0) {
                o[i] = o[r];
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
    }
done:
    PyMem_Free(table);
    PyBuffer_Release(&view);
    PyBuffer_Release(&t_at);
    PyBuffer_Release(&t_len);
    PyBuffer_Release(&qid);
    PyBuffer_Release(&out);
    return first;
}

/* props(buf, props_at, props_len, names, out_buf, offs, found) -> None
 *
 * Every record's properties (``props_len[i]`` bytes at ``props_at[i]`` of ``buf``) copied one
 * after the other into ``out_buf`` (record i owns [offs[i], offs[i+1]), ``offs`` native int64 of
 * n + 1), and each wanted name's value found in each record, as Java's
 * ``string2messageProperties`` reads them: ``name\x01value`` pairs split at ``\x02``, the first
 * ``\x01`` of a pair ending its name, a pair with an empty value dropped, the last of a name
 * kept.  ``found`` (native int64, len(names) x 2 x n): the value's start in ``out_buf`` and its
 * length, or -1.  ValueError for a record whose properties lie past ``buf``.
 * (store/propscan.py: ``gather`` and ``find`` are the numpy twin.) */
static PyObject *props(PyObject *self, PyObject *args) {
    Py_buffer view, p_at, p_len, dst, offs, found;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*y*y*O!w*w*w*", &view, &p_at, &p_len, &PyTuple_Type, &names, &dst, &offs, &found))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = p_at.len / 8, k = PyTuple_GET_SIZE(names);
    if (k > 16) {
        PyErr_SetString(PyExc_ValueError, "at most 16 names");
        goto done;
    }
    const char *name[16];
    Py_ssize_t name_len[16];
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *nm = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(nm)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            goto done;
        }
        name[j] = PyBytes_AS_STRING(nm);
        name_len[j] = PyBytes_GET_SIZE(nm);
    }
    if (p_at.len % 8 || p_len.len != p_at.len || offs.len < 8 * (n + 1) || found.len < 8 * 2 * k * n) {
        PyErr_SetString(PyExc_ValueError, "props_at, props_len: int64 of one length; offs: n + 1; found: names x 2 x n");
        goto done;
    }
    const unsigned char *b = view.buf;
    const int64_t *at = p_at.buf, *len = p_len.buf;
    int64_t *of = offs.buf, *fd = found.buf, total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (len[i] < 0 || at[i] < 0 || at[i] + len[i] > view.len) {
            PyErr_Format(PyExc_ValueError, "record %zd's properties lie past its file", i);
            goto done;
        }
        total += len[i];
    }
    if (dst.len < total) {
        PyErr_SetString(PyExc_ValueError, "out_buf is shorter than the properties");
        goto done;
    }
    unsigned char *d = dst.buf;
    for (Py_ssize_t j = 0; j < 2 * k * n; j++)
        fd[j] = -1;
    int64_t o = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *r = b + at[i];
        int64_t m = len[i];
        memcpy(d + o, r, (size_t)m);
        of[i] = o;
        int64_t pair = 0;
        while (pair <= m) {
            int64_t end = pair, one = -1;
            while (end < m && r[end] != 2) {
                if (one < 0 && r[end] == 1)
                    one = end;
                end++;
            }
            if (one >= 0 && end > one + 1) {
                for (Py_ssize_t j = 0; j < k; j++) {
                    if (one - pair == name_len[j] && memcmp(r + pair, name[j], (size_t)name_len[j]) == 0) {
                        fd[(2 * j) * n + i] = o + one + 1;
                        fd[(2 * j + 1) * n + i] = end - one - 1;
                    }
                }
            }
            pair = end + 1;
        }
        o += m;
    }
    of[n] = o;
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&p_at);
    PyBuffer_Release(&p_len);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&found);
    return result;
}

/* hashes(buf, starts, lens, seeds, out) -> rows
 *
 * Java's String.hashCode of each segment ``buf[starts[i]:starts[i] + lens[i]]`` of UTF-8 text,
 * continuing from ``seeds[i]`` (the hash of a prefix; native int64 each), into ``out`` (native
 * int32): h = 31 * h + unit, wrapping at 32 bits.  A segment holding a byte >= 0x80 (whose UTF-16
 * units are not its bytes) is left for the caller to decode: ``rows`` lists those.
 * (store/javahashes.py: ``BufferHashes`` is the numpy twin.) */
static PyObject *hashes(PyObject *self, PyObject *args) {
    Py_buffer view, st, ln, sd, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &view, &st, &ln, &sd, &out))
        return NULL;
    PyObject *rows = NULL;
    Py_ssize_t n = st.len / 8;
    if (st.len % 8 || ln.len != st.len || sd.len != st.len || out.len < 4 * n) {
        PyErr_SetString(PyExc_ValueError, "starts, lens, seeds: int64 of one length; out: int32 as long");
        goto done;
    }
    const unsigned char *b = view.buf;
    const int64_t *s = st.buf, *l = ln.buf, *seed = sd.buf;
    int32_t *o = out.buf;
    rows = PyList_New(0);
    if (!rows)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || s[i] + l[i] > view.len) {
            PyErr_Format(PyExc_IndexError, "segment %zd lies past the buffer", i);
            Py_CLEAR(rows);
            goto done;
        }
        uint32_t h = (uint32_t)seed[i];
        unsigned char high = 0;
        const unsigned char *c = b + s[i];
        for (int64_t k = 0; k < l[i]; k++) {
            h = 31u * h + c[k];
            high |= c[k];
        }
        o[i] = (int32_t)h;
        if (high & 0x80) {
            PyObject *v = PyLong_FromSsize_t(i);
            if (!v || PyList_Append(rows, v)) {
                Py_XDECREF(v);
                Py_CLEAR(rows);
                goto done;
            }
            Py_DECREF(v);
        }
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&st);
    PyBuffer_Release(&ln);
    PyBuffer_Release(&sd);
    PyBuffer_Release(&out);
    return rows;
}

static inline void put_be64(unsigned char *p, int64_t v) {
    put_be32(p, (int32_t)((uint64_t)v >> 32));
    put_be32(p + 4, (int32_t)v);
}

/* index_put(file, hashes, phys, store_ts, max_slots, max_entries) -> added
 *
 * Keys added to an IndexFile's bytes ``file`` (4.9.8's layout: a 40-byte header, ``max_slots``
 * i32 hash slots, 20-byte entries [hash][phys][time diff][prev]), in order, until it is full:
 * each entry chained to its slot's newest (an entry of an uncommitted batch, past the header's
 * count, is stepped over along its chain), then the slot, then the header.  The caller reserved
 * the blocks behind what is written.  (store/indexfile.py: ``put_few`` and ``put_batch`` are the
 * twins, which write the same bytes.) */
static PyObject *index_put(PyObject *self, PyObject *args) {
    Py_buffer file, hs, ph, ts;
    Py_ssize_t max_slots, max_entries;
    if (!PyArg_ParseTuple(args, "w*y*y*y*nn", &file, &hs, &ph, &ts, &max_slots, &max_entries))
        return NULL;
    PyObject *result = NULL;
    int64_t *newest = NULL;
    Py_ssize_t n_keys = hs.len / 8;
    const Py_ssize_t entries_at = 40 + 4 * max_slots;
    if (hs.len % 8 || ph.len != hs.len || ts.len != hs.len || max_slots <= 0 ||
        file.len < entries_at + 20 * max_entries) {
        PyErr_SetString(PyExc_ValueError, "hashes, phys, store_ts: int64 of one length; file: a whole IndexFile");
        goto done;
    }
    unsigned char *m = file.buf;
    const int64_t *h = hs.buf, *p = ph.buf, *t = ts.buf;
    int64_t begin_ts = be64(m), begin_phys = be64(m + 16);
    int64_t slot_count = be32(m + 32), n0 = be32(m + 36);
    int64_t k = n_keys < max_entries - n0 ? n_keys : max_entries - n0;
    if (k <= 0) {
        result = PyLong_FromLong(0);
        goto done;
    }
    int64_t base = begin_ts > 0 ? begin_ts : t[0];
    if (n0 <= 1) {
        begin_ts = t[0];
        begin_phys = p[0];
    }
    Py_ssize_t size = 16;                 /* slot -> its newest entry of this call (open addressing) */
    while (size < 2 * k)
        size <<= 1;
    newest = PyMem_Malloc(2 * size * sizeof(int64_t));
    if (!newest) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < 2 * size; j++)
        newest[j] = -1;
    for (int64_t i = 0; i < k; i++) {
        int64_t n = n0 + i, slot = ((h[i] % max_slots) + max_slots) % max_slots;
        Py_ssize_t at = 40 + 4 * slot, j = (Py_ssize_t)((uint64_t)slot * 0x9E3779B97F4A7C15ULL >> 20) & (size - 1);
        while (newest[2 * j] >= 0 && newest[2 * j] != slot)
            j = (j + 1) & (size - 1);
        int64_t prev;
        if (newest[2 * j] == slot) {
            prev = newest[2 * j + 1];
        } else {
            prev = be32(m + at);
            if (prev >= n0) {                 /* an uncommitted batch's entry: back along its chain */
                for (Py_ssize_t step = 0; step < max_entries && prev >= n0; step++)
                    prev = prev < max_entries ? be32(m + entries_at + 20 * prev + 16) : 0;
            }
            if (prev <= 0) {
                prev = 0;
                slot_count++;
            }
        }
        int64_t d = t[i] - base, diff;
        diff = d < 0 ? 0 : d / 1000;          /* (Python's floor and C's truncation agree from 0 up) */
        if (diff > 0x7FFFFFFF)
            diff = 0x7FFFFFFF;
        unsigned char *e = m + entries_at + 20 * n;
        put_be32(e, (int32_t)h[i]);
        put_be64(e + 4, p[i]);
        put_be32(e + 12, (int32_t)diff);
        put_be32(e + 16, (int32_t)prev);
        put_be32(m + at, (int32_t)n);
        newest[2 * j] = slot;
        newest[2 * j + 1] = n;
    }
    put_be64(m, begin_ts);
    put_be64(m + 8, t[k - 1]);
    put_be64(m + 16, begin_phys);
    put_be64(m + 24, p[k - 1]);
    put_be32(m + 32, (int32_t)slot_count);
    put_be32(m + 36, (int32_t)(n0 + k));
    result = PyLong_FromLongLong(k);
done:
    PyMem_Free(newest);
    PyBuffer_Release(&file);
    PyBuffer_Release(&hs);
    PyBuffer_Release(&ph);
    PyBuffer_Release(&ts);
    return result;
}

static PyMethodDef methods[] = {
    {"records", records, METH_VARARGS, "Where one CommitLog file's records start (the dispatcher's pass)."},
    {"headers", headers, METH_VARARGS, "A CommitLog stream's record headers, checked (a slave's stream)."},
    {"fields", fields, METH_VARARGS, "The fixed fields of many records of one file (the dispatcher's columns)."},
    {"groups", groups, METH_VARARGS, "The records' (topic, queue id) groups, in order of first appearance."},
    {"props", props, METH_VARARGS, "Every record's properties gathered, and the wanted names' values found."},
    {"hashes", hashes, METH_VARARGS, "Java's String.hashCode of ASCII segments of a buffer, from seeds."},
    {"index_put", index_put, METH_VARARGS, "Keys added to an IndexFile's bytes, as put_few writes them."},
    {"json_header", rbx_json_header, METH_O, "A remoting frame's JSON header's fields, or None (the twin decides)."},
    {"typed_header", rbx_typed_header, METH_VARARGS, "A request's extFields typed by its schema, or None."},
    {"batch_records", rbx_batch_records, METH_VARARGS, "A client's batch as stored records, or None (the twin decides)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "rocketbox's compiled hot paths.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "MAGIC", MAGIC) || PyModule_AddIntConstant(m, "BLANK_MAGIC", BLANK_MAGIC))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
