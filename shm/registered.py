"""Where a slave's master is, as the name servers last answered the broker's registration
(REGISTER_BROKER's response: ``haServerAddr``, ``masterAddr``, filled for a slave once its master
is registered): reader 0 registers and writes it here, the slave's replicator reads it.  One small
JSON file in the run directory, a temp file renamed over the last."""
from __future__ import annotations

import contextlib
import logging
import os

import orjson

from rocketbox.store.configfile import loads_object

log = logging.getLogger("rocketbox.replicator")
NAME = "master.json"


def write(run_dir: str, ha_server_addr: str, master_addr: str) -> None:
    path = os.path.join(run_dir, NAME)
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(orjson.dumps({"haServerAddr": ha_server_addr, "masterAddr": master_addr}))
        os.replace(path + ".tmp", path)
    except OSError as e:
        log.warning("writing the master's addresses to %s failed: %s", path, e)


def read(run_dir: str) -> dict:
    """``{"haServerAddr", "masterAddr"}`` as last answered; {} when none was."""
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(run_dir, NAME), "rb") as f:
            return loads_object(f.read())
    return {}
