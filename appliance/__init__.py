"""The appliance: config, CLI, supervisor, roles, recovery, store checker.

Importing it pins numpy's OpenBLAS to one thread (before numpy loads): rocketbox does no linear
algebra, and a BLAS thread pool per process only adds threads that wake and spin on a 2-core box.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
