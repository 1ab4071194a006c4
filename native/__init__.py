"""The compiled hot paths (``native/_native.c``), or None: the extension module unless
``ROCKETBOX_PURE_PYTHON=1`` is set or it was not built (``install.sh`` builds it with the checkout:
``pip install -e``, gcc and Python's headers; a build that fails leaves it out, and everything
runs on the Python twins).  Each module that has a hot path picks the compiled function or its
own Python twin from ``compiled`` at import; the twins give the same results
(``tests/unit/native``).  docs/decisions/2026-11-29-compiled-hot-paths.md says where the line is.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

compiled: ModuleType | None = None
why_not = "ROCKETBOX_PURE_PYTHON=1"        # why ``compiled`` is None (for the start's log line)
if os.environ.get("ROCKETBOX_PURE_PYTHON") != "1":
    try:
        compiled = importlib.import_module("rocketbox.native._native")
    except ImportError as e:
        why_not = f"not built ({e}): run ./install.sh --dev again, with gcc and python3-dev"


def describe() -> str:
    """What runs the hot paths, for the start's log line."""
    return "compiled (native/_native.c)" if compiled is not None else f"pure Python: {why_not}"
