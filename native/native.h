/* The functions of native/'s other files, for the module's method table in _native.c. */
#ifndef ROCKETBOX_NATIVE_H
#define ROCKETBOX_NATIVE_H

#include <Python.h>

/* remoting.c: the remoting header */
PyObject *rbx_json_header(PyObject *self, PyObject *arg);
PyObject *rbx_typed_header(PyObject *self, PyObject *args);

/* records.c: the stored records a reader makes */
PyObject *rbx_batch_records(PyObject *self, PyObject *args);

#endif
