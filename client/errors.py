"""Errors the client raises, typed by RocketMQ response code (FACTS §2.2).

``retriable`` follows the Java producer's ``retryResponseCodes`` (TOPIC_NOT_EXIST,
SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, ...) plus everything that went wrong on the way
(connection closed, time-out): trying another broker or a bit later may succeed.
"""
from __future__ import annotations

from rocketbox.remoting.codes import ResponseCode as RC

RETRIABLE_CODES = frozenset({RC.TOPIC_NOT_EXIST, RC.SERVICE_NOT_AVAILABLE, RC.SYSTEM_ERROR, RC.NO_PERMISSION,
                             RC.SYSTEM_BUSY, RC.FLUSH_DISK_TIMEOUT})


class MQClientError(Exception):
    """A failure before a broker answered: no route, connection closed, time-out.

    ``may_be_stored``: a request (this one, or an earlier try of the same send) was written to a
    broker and went unanswered, so what it asked for may have happened all the same: a send that
    failed this way may be in the store (and sending it again may store it twice)."""

    def __init__(self, message: str, code: int = -1, may_be_stored: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.may_be_stored = may_be_stored

    @property
    def retriable(self) -> bool:
        """Trying again (another broker, a bit later) may succeed: always, before a broker answered."""
        return True


class MQBrokerError(MQClientError):
    """A broker (or name server) answered with a non-success code."""

    def __init__(self, code: int, remark: str | None, addr: str = "") -> None:
        try:
            name = RC(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name} ({code}) from {addr or 'broker'}: {remark or ''}".rstrip(": "), code)
        self.remark = remark or ""
        self.addr = addr

    @property
    def retriable(self) -> bool:
        """The code is one the Java producer retries on (``RETRIABLE_CODES``)."""
        return self.code in RETRIABLE_CODES
