"""A store config for in-process writer/dispatcher tests: small files, a private shm prefix."""
import os

from appliance import config


def small_config(root, tag: str, **extra):
    settings = {"storePathRootDir": str(root), "shmPrefix": f"/rbx{tag}-{os.getpid()}",
                "mappedFileSizeCommitLog": str(128 * 1024), "maxMessageSize": "4096",
                "ringRequestBytes": str(256 * 1024), "brokerIP1": "127.0.0.1", "maxHashSlotNum": "100",
                "maxIndexNum": "1000", "shmQueueSlots": "64", "shmTopicSlots": "32"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config.load(overrides=settings)
