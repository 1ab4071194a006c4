"""The appliance: config, CLI, supervisor, roles, recovery, store checker.

Importing it sets up the process the way every rocketbox role wants it:

- numpy's OpenBLAS is pinned to one thread (before numpy loads): rocketbox does no linear
  algebra, and a BLAS thread pool per process only adds threads that wake and spin on 2 cores.
- glibc malloc keeps freed memory for reuse instead of returning it to the kernel: the roles
  allocate and free the same few MiB of numpy temporaries every pass, and with glibc's defaults
  each of those is a fresh mmap whose every page faults in again (measured: gathering one pass's
  properties took 3x longer that way).
"""
import ctypes
import ctypes.util
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)     # glibc's ceiling for this knob
_libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
