"""A store run in one process: shared state, boot recovery, a writer, a dispatcher and a ring
client, each stepped by the caller.  For the benchmarks that measure one path's cost
(``bench.paths``) and for the tests of the store roles; never for serving."""
import contextlib
import os

from rocketbox.appliance import config


def small_config(root, tag: str, **extra):
    """A config with small files and a private shm prefix (``tag`` and this pid)."""
    settings = {"storePathRootDir": str(root), "shmPrefix": f"/rbx{tag}-{os.getpid()}",
                "mappedFileSizeCommitLog": str(128 * 1024), "maxMessageSize": "4096",
                "ringRequestBytes": str(256 * 1024), "brokerIP1": "127.0.0.1", "maxHashSlotNum": "100",
                "maxIndexNum": "1000", "shmQueueSlots": "64", "shmTopicSlots": "32"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config.load(overrides=settings)


@contextlib.contextmanager
def running_store(cfg):
    """Fresh shared state, boot recovery, and a writer, a dispatcher and a client in this process;
    everything closed and unlinked afterwards."""
    from rocketbox.appliance import recovery
    from rocketbox.dispatcher.service import DispatcherService
    from rocketbox.shm.ringclient import RingClient
    from rocketbox.shm.state import SharedState
    from rocketbox.writer.service import WriterService

    sh = SharedState(cfg.geometry()).create()
    try:
        recovery.recover(cfg, sh)
        w, d = WriterService(cfg, sh).open(), DispatcherService(cfg, sh).open()
        c = RingClient(cfg, sh).open()
        yield sh, w, d, c
        c.close()
        w.close()
        d.close()
    finally:
        sh.close()
        sh.unlink()
