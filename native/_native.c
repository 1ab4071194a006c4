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

#define MAGIC ((int32_t)0xDAA320A7)
#define BLANK_MAGIC ((int32_t)0xCBD43194)

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

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

static PyMethodDef methods[] = {
    {"records", records, METH_VARARGS, "Where one CommitLog file's records start (the dispatcher's pass)."},
    {"headers", headers, METH_VARARGS, "A CommitLog stream's record headers, checked (a slave's stream)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "rocketbox's compiled hot paths.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
