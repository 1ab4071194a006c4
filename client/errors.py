"""Errors the client raises, typed by RocketMQ response code (FACTS §2.2).

``retriable`` follows the Java producer's ``retryResponseCodes`` (TOPIC_NOT_EXIST,
SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, ...) plus everything that went wrong on the way
(connection closed, time-out): trying another broker or a bit later may succeed.
"""
from __future__ import annotations

from remoting.codes import ResponseCode as RC

RETRIABLE_CODES = frozenset({RC.TOPIC_NOT_EXIST, RC.SERVICE_NOT_AVAILABLE, RC.SYSTEM_ERROR, RC.NO_PERMISSION,
                             RC.SYSTEM_BUSY, RC.FLUSH_DISK_TIMEOUT})


class MQClientError(Exception):
    """A failure before a broker answered: no route, connection closed, time-out."""
    retriable = True

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        self.code = code


class MQBrokerError(MQClientError):
    """A broker (or name server) answered with a non-success code."""

    def __init__(self, code: int, remark: str | None, addr: str = ""):
        try:
            name = RC(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name} ({code}) from {addr or 'broker'}: {remark or ''}".rstrip(": "), code)
        self.remark = remark or ""
        self.addr = addr

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE_CODES
