"""The store's own errors.  Corrupt data names the file and the offset; nothing here is retried."""


class StoreError(Exception):
    """Base of every error the store raises."""


class CorruptData(StoreError):
    """Bytes on disk that do not parse: names the path (or 'commitlog') and the offset."""

    def __init__(self, where: str, offset: int, why: str):
        super().__init__(f"{where} @ {offset}: {why}")
        self.where, self.offset, self.why = where, offset, why


class FileSizeMismatch(StoreError):
    """A mapped file whose length is not the configured file size (RocketMQ refuses to load it)."""


class DiskFull(StoreError):
    """A store file could not be created: no space left (or another allocation failure)."""


class MapFailed(StoreError):
    """A store file could not be mapped (ENOMEM: the process's mappings or address space ran out)."""


class MessageRejected(StoreError):
    """A message that may not be stored; ``code`` is the RocketMQ response code to answer with."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code, self.remark = code, remark
