/* The remoting header's hot paths (docs/decisions/2026-11-29-compiled-hot-paths.md): a JSON
 * header read straight into its fields, and a request's extFields typed by its schema.
 *
 * Both take only the common case and answer None for anything else: a value of another type, an
 * escape they do not take, a missing required field, a number that is not plain digits.  Their
 * Python twins (remoting/codec.py's py_json_header, remoting/headers.py's generated decoders) then
 * do the whole job, errors and all, so what a client sees never depends on which one ran.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

/* ------------------------------------------------------------------ JSON header */

typedef struct {
    const unsigned char *p, *end;
    unsigned char *scratch;         /* a string's bytes unescaped (never longer than the header) */
} Json;

static void skip_ws(Json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hex4(const unsigned char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static unsigned char *put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | (cp >> 12));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | (cp >> 18));
        *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* The string at j->p (its opening quote) -> its bytes, unescaped, in *s and *n (the scratch, or
 * the header itself when it has no escape); 0 for a control character, an unknown escape or a
 * lone surrogate (the twin decides what those are). */
static int read_string(Json *j, const unsigned char **s, Py_ssize_t *n) {
    const unsigned char *p = ++j->p, *end = j->end;
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20)
        p++;
    if (p < end && *p == '"') {                    /* no escape: the header's own bytes */
        *s = j->p, *n = p - j->p, j->p = p + 1;
        return 1;
    }
    unsigned char *o = j->scratch;
    memcpy(o, j->p, (size_t)(p - j->p));
    o += p - j->p;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            *s = j->scratch, *n = o - j->scratch, j->p = p + 1;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c != '\\') {
            *o++ = c, p++;
            continue;
        }
        if (p + 1 >= end)
            return 0;
        switch (p[1]) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (p + 6 > end || !hex4(p + 2, &cp))
                return 0;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return 0;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p + 12 > end || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return 0;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            o = put_utf8(o, cp);
            p += 6;
            continue;
        }
        default:
            return 0;
        }
        p += 2;
    }
    return 0;
}

/* -> a new str of the string at j->p, or NULL with no error set when the twin must decide
 * (invalid UTF-8 included). */
static PyObject *read_str(Json *j) {
    const unsigned char *s;
    Py_ssize_t n;
    if (!read_string(j, &s, &n))
        return NULL;
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!u)
        PyErr_Clear();
    return u;
}

/* A JSON integer (-?(0|[1-9][0-9]*), at most 18 digits, not followed by a fraction or exponent). */
static int read_int(Json *j, long long *out) {
    const unsigned char *p = j->p, *end = j->end;
    int neg = p < end && *p == '-';
    p += neg;
    const unsigned char *digits = p;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - digits < 19)
        v = v * 10 + (*p++ - '0');
    Py_ssize_t nd = p - digits;
    if (nd == 0 || nd > 18 || (nd > 1 && *digits == '0'))
        return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
        return 0;
    *out = neg ? -v : v;
    j->p = p;
    return 1;
}

static int literal(Json *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n))
        return 0;
    j->p += n;
    return 1;
}

/* extFields: an object of strings -> a new dict; NULL (no error set) for anything else. */
static PyObject *read_ext(Json *j) {
    PyObject *ext = PyDict_New();
    if (!ext)
        return NULL;
    j->p++;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return ext;
    }
    while (j->p < j->end && *j->p == '"') {
        PyObject *k = read_str(j), *v = NULL;
        if (!k)
            break;
        skip_ws(j);
        if (j->p < j->end && *j->p == ':') {
            j->p++;
            skip_ws(j);
            if (j->p < j->end && *j->p == '"')
                v = read_str(j);
        }
        if (!v || PyDict_SetItem(ext, k, v)) {
            Py_DECREF(k);
            Py_XDECREF(v);
            break;
        }
        Py_DECREF(k);
        Py_DECREF(v);
        skip_ws(j);
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return ext;
        }
        if (j->p >= j->end || *j->p != ',')
            break;
        j->p++;
        skip_ws(j);
    }
    Py_DECREF(ext);
    return NULL;
}

/* Whether the twin's decoder takes these bytes as UTF-8 (a string this function only steps over). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!u) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(u);
    return 1;
}

enum { K_OTHER, K_CODE, K_LANGUAGE, K_VERSION, K_OPAQUE, K_FLAG, K_REMARK, K_EXT };

static int key_of(const unsigned char *s, Py_ssize_t n) {
#define IS(word) (n == (Py_ssize_t)sizeof(word) - 1 && !memcmp(s, word, sizeof(word) - 1))
    if (IS("code")) return K_CODE;
    if (IS("language")) return K_LANGUAGE;
    if (IS("version")) return K_VERSION;
    if (IS("opaque")) return K_OPAQUE;
    if (IS("flag")) return K_FLAG;
    if (IS("remark")) return K_REMARK;
    if (IS("extFields")) return K_EXT;
    return K_OTHER;
#undef IS
}

/* One top-level value: ints into ints[key], language and remark kept, extFields read; any other
 * key's string, integer, true, false or null stepped over.  0: the twin decides. */
static int read_member(Json *j, int key, long long *ints, int *have, PyObject **language, PyObject **remark,
                       PyObject **ext) {
    unsigned char c = j->p < j->end ? *j->p : 0;
    if (c == '"') {
        if (key == K_LANGUAGE || key == K_REMARK) {
            PyObject *s = read_str(j), **slot = key == K_LANGUAGE ? language : remark;
            if (!s)
                return 0;
            Py_XSETREF(*slot, s);
            return 1;
        }
        if (key != K_OTHER)             /* a number or extFields as a string */
            return 0;
        const unsigned char *s;
        Py_ssize_t n;
        return read_string(j, &s, &n) && valid_utf8(s, n);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        long long v;
        if (!read_int(j, &v) || key == K_LANGUAGE || key == K_EXT)
            return 0;
        if (key == K_REMARK)
            Py_CLEAR(*remark);
        else if (key != K_OTHER)
            ints[key] = v, have[key] = 1;
        return 1;
    }
    if (c == '{') {
        if (key != K_EXT)
            return 0;
        PyObject *e = read_ext(j);
        if (!e)
            return 0;
        Py_XSETREF(*ext, e);
        return 1;
    }
    if (literal(j, "null")) {
        if (key == K_REMARK)
            Py_CLEAR(*remark);
        else if (key == K_EXT)
            Py_CLEAR(*ext);
        return key == K_OTHER || key == K_REMARK || key == K_EXT;
    }
    if (literal(j, "true") || literal(j, "false")) {
        if (key == K_REMARK)
            Py_CLEAR(*remark);
        return key == K_OTHER || key == K_REMARK;
    }
    return 0;
}

/* json_header(raw) -> (code, language, version, opaque, flag, remark, ext) or None */
PyObject *rbx_json_header(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE))
        return NULL;
    Json j = {view.buf, (const unsigned char *)view.buf + view.len, PyMem_Malloc(view.len + 1)};
    long long ints[K_EXT + 1] = {0};
    int have[K_EXT + 1] = {0}, ok = 0;
    PyObject *language = NULL, *remark = NULL, *ext = NULL, *out = NULL;
    if (!j.scratch) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    skip_ws(&j);
    if (j.p < j.end && *j.p == '{') {
        j.p++;
        skip_ws(&j);
        ok = j.p < j.end && *j.p == '}';
        if (ok)
            j.p++;
        while (!ok && j.p < j.end && *j.p == '"') {
            const unsigned char *s;
            Py_ssize_t n;
            if (!read_string(&j, &s, &n))
                break;
            int key = key_of(s, n);
            if (key == K_OTHER && !valid_utf8(s, n))
                break;
            skip_ws(&j);
            if (j.p >= j.end || *j.p != ':')
                break;
            j.p++;
            skip_ws(&j);
            if (!read_member(&j, key, ints, have, &language, &remark, &ext))
                break;
            skip_ws(&j);
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                ok = 1;
            } else if (j.p < j.end && *j.p == ',') {
                j.p++;
                skip_ws(&j);
            } else {
                break;
            }
        }
        skip_ws(&j);
        ok = ok && j.p == j.end && have[K_CODE];
    }
    if (ok && !ext)
        ext = PyDict_New();
    if (ok && ext) {
        if (!language)
            language = PyUnicode_FromString("JAVA");
        if (language)
            out = Py_BuildValue("(LOLLLOO)", ints[K_CODE], language, ints[K_VERSION], ints[K_OPAQUE], ints[K_FLAG],
                                remark ? remark : Py_None, ext);
    } else if (!PyErr_Occurred()) {
        out = Py_NewRef(Py_None);
    }
    Py_XDECREF(language);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    PyMem_Free(j.scratch);
    PyBuffer_Release(&view);
    return out;
}

/* ------------------------------------------------------------------ typed extFields */

enum { KIND_S, KIND_I, KIND_L, KIND_B };

/* A decimal of ASCII digits only, at most ``max_digits`` of them -> 1 and *out; else 0. */
static int plain_decimal(PyObject *s, int max_digits, long long *out) {
    if (!PyUnicode_IS_ASCII(s))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *c = (const char *)PyUnicode_1BYTE_DATA(s);
    if (n == 0 || n > max_digits)
        return 0;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < '0' || c[i] > '9')
            return 0;
        v = v * 10 + (c[i] - '0');
    }
    *out = v;
    return 1;
}

/* "true"/"1" (any case) -> 1, "false"/"0" -> 0, anything else -1. */
static int plain_bool(PyObject *s) {
    if (!PyUnicode_IS_ASCII(s))
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *c = (const char *)PyUnicode_1BYTE_DATA(s);
    if (n == 1 && (c[0] == '1' || c[0] == '0'))
        return c[0] == '1';
    if ((n == 4 && !PyOS_strnicmp(c, "true", 4)))
        return 1;
    if ((n == 5 && !PyOS_strnicmp(c, "false", 5)))
        return 0;
    return -1;
}

/* typed_header(ext, spec) -> dict or None.  ``spec``: a tuple of (name, short name or None, kind
 * 0-3 for S I L B, required) per field, in the schema's order. */
PyObject *rbx_typed_header(PyObject *self, PyObject *args) {
    PyObject *ext, *spec;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &ext, &PyTuple_Type, &spec))
        return NULL;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(spec); i++) {
        PyObject *f = PyTuple_GET_ITEM(spec, i), *v = NULL, *got;
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 4) {
            PyErr_SetString(PyExc_TypeError, "a field's spec is (name, short name, kind, required)");
            goto fail;
        }
        PyObject *name = PyTuple_GET_ITEM(f, 0), *shortname = PyTuple_GET_ITEM(f, 1);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(f, 2));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(f, 3));
        if ((kind == -1 || required < 0) && PyErr_Occurred())
            goto fail;
        if (shortname != Py_None && (v = PyDict_GetItemWithError(ext, shortname)) == NULL && PyErr_Occurred())
            goto fail;
        if (v == NULL && (v = PyDict_GetItemWithError(ext, name)) == NULL && PyErr_Occurred())
            goto fail;
        if (v != NULL && !PyUnicode_CheckExact(v))
            goto twin;
        if (v == NULL || (kind != KIND_S && PyUnicode_GET_LENGTH(v) == 0)) {   /* Java: empty is null */
            if (required)
                goto twin;
            got = Py_NewRef(Py_None);
        } else if (kind == KIND_S) {
            got = Py_NewRef(v);
        } else if (kind == KIND_B) {
            int b = plain_bool(v);
            if (b < 0)
                goto twin;
            got = PyBool_FromLong(b);
        } else {
            long long n;
            if (!plain_decimal(v, kind == KIND_I ? 9 : 18, &n))
                goto twin;
            got = PyLong_FromLongLong(n);
        }
        if (!got || PyDict_SetItem(out, name, got)) {
            Py_XDECREF(got);
            goto fail;
        }
        Py_DECREF(got);
    }
    return out;
twin:
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    return NULL;
}
