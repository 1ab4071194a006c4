/* The remoting header's hot paths (remoting.c), for the module's method table in _native.c. */
#ifndef ROCKETBOX_NATIVE_REMOTING_H
#define ROCKETBOX_NATIVE_REMOTING_H

#include <Python.h>

PyObject *rbx_json_header(PyObject *self, PyObject *arg);
PyObject *rbx_typed_header(PyObject *self, PyObject *args);

#endif
