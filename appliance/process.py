"""How every rocketbox role's process is set up, done by ``python -m rocketbox.appliance`` before
anything else is imported (importing a module of rocketbox changes nothing in the process):

- numpy's OpenBLAS is pinned to one thread (before numpy loads): rocketbox does no linear
  algebra, and a BLAS thread pool per process only adds threads that wake and spin on 2 cores.
- glibc malloc keeps freed memory for reuse instead of returning it to the kernel: the roles
  allocate and free the same few MiB of numpy temporaries every pass, and with glibc's defaults
  each of those is a fresh mmap whose every page faults in again.

And each role's process names itself after its role (``name_process``), once it knows it.
"""
import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def set_up() -> None:
    """Pin BLAS to one thread and keep glibc malloc's freed memory (see the module's text)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)     # glibc's ceiling for this knob
    libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)


_PR_SET_NAME = 15
COMM_PREFIX = "rbx-"


def process_name(role: str) -> str:
    """What ``ps -o comm``, top and ``appliance status`` know the process of ``role`` by
    ("rbx-writer", "rbx-reader-0", "rbx-supervisor"): the kernel keeps 15 bytes of it."""
    return (COMM_PREFIX + role)[:15]


def name_process(role: str) -> None:
    """Name this process after ``role`` (``process_name``): a role forked by the supervisor still
    has the supervisor's command line, and one run by systemd would otherwise be "python3"."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.prctl(_PR_SET_NAME, process_name(role).encode(), 0, 0, 0)
