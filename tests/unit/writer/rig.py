"""A store config for in-process writer/dispatcher tests: small files, a private shm prefix."""
import contextlib
import os

from appliance import config


def small_config(root, tag: str, **extra):
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
    from appliance import recovery
    from dispatcher.service import DispatcherService
    from shm.state import SharedState
    from writer.client import RingClient
    from writer.service import WriterService

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
