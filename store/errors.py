"""The store's own errors.  Corrupt data names the file and the offset; nothing here is retried.
``Condition``: a state a role logs when it begins and when it ends, not at every meeting."""
import errno
import time


class StoreError(Exception):
    """Base of every error the store raises."""


class CorruptData(StoreError):
    """Bytes on disk that do not parse: names the path (or 'commitlog') and the offset."""

    def __init__(self, where: str, offset: int, why: str):
        super().__init__(f"{where} @ {offset}: {why}")
        self.where, self.offset, self.why = where, offset, why


class FileSizeMismatch(StoreError):
    """A mapped file whose length is not the configured file size (RocketMQ refuses to load it)."""


class FileGap(StoreError):
    """A directory of offset-named files with one missing between two others."""


class DiskFull(StoreError):
    """A store file could not be created: no space left (or another allocation failure)."""


class MapFailed(StoreError):
    """A store file could not be mapped (ENOMEM: the process's mappings or address space ran out)."""


class MessageRejected(StoreError):
    """A message that may not be stored; ``code`` is the RocketMQ response code to answer with."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code, self.remark = code, remark


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


def no_space(e: BaseException) -> bool:
    """The error says the disk (or the quota) is full."""
    return isinstance(e, DiskFull) or isinstance(e, OSError) and e.errno in NO_SPACE


def out_of_files(e: BaseException) -> bool:
    """The error says the process (or the system) has no descriptor or mapping left for a file."""
    return isinstance(e, MapFailed) or isinstance(e, OSError) and e.errno in OUT_OF_FILES


class Condition:
    """A condition a role meets again and again (a full disk refusing each batch) logged once when
    it begins and once when it ends."""

    def __init__(self, log, what: str):
        self.log, self.what = log, what
        self.since: float | None = None

    def met(self, detail) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.log.error("%s: %s", self.what, detail)

    def cleared(self) -> None:
        if self.since is not None:
            self.log.warning("%s: over after %.1f s", self.what, time.monotonic() - self.since)
            self.since = None
