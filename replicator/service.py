"""The replicator (``appliance run replicator``; the design card's reput-to-slave process): on a
master, the HA service slaves copy the CommitLog from (``replicator/master.py``); on a slave, the
copy of its master: the CommitLog through the slave's writer, and the master's metadata
(``replicator/slave.py``)."""
from __future__ import annotations

from rocketbox.net.role import ServerRole
from rocketbox.replicator.master import MasterService
from rocketbox.replicator.slave import SlaveService


def ReplicatorService(cfg, shared) -> ServerRole:     # noqa: N802  (the role table names a class-like maker)
    return SlaveService(cfg, shared) if cfg.slave else MasterService(cfg, shared)
