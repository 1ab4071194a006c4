/* The functions of native/'s other files, for the module's method table in _native.c. */
#ifndef ROCKETBOX_NATIVE_H
#define ROCKETBOX_NATIVE_H

#include <Python.h>
#include <stdint.h>

/* The CommitLog's magics, big-endian integers, as store/message.py declares them. */
#define MAGIC ((int32_t)0xDAA320A7)
#define BLANK_MAGIC ((int32_t)0xCBD43194)

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline void put_be32(unsigned char *p, int32_t v) {
    p[0] = (unsigned char)((uint32_t)v >> 24), p[1] = (unsigned char)((uint32_t)v >> 16);
    p[2] = (unsigned char)((uint32_t)v >> 8), p[3] = (unsigned char)v;
}

/* remoting.c: the remoting header */
PyObject *rbx_json_header(PyObject *self, PyObject *arg);
PyObject *rbx_typed_header(PyObject *self, PyObject *args);

/* records.c: the stored records a reader makes */
PyObject *rbx_batch_records(PyObject *self, PyObject *args);

#endif
