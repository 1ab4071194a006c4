"""The transactional producer (Java's TransactionMQProducer; FACTS-wave2 §4): a message sent as
a half message, invisible to consumers until the producer's local transaction decides it.

``send_in_transaction(msg, local, arg)`` sends it with ``TRAN_MSG=true`` and ``PGROUP`` (a delay
level is dropped, as Java drops it), runs ``local(msg, arg)`` only when the broker answered
SEND_OK (any other status rolls back without it, as Java), and ends the transaction with the
answer: END_TRANSACTION, oneway, to the broker that stored the half, naming it by its offsets.
``local`` answers COMMIT, ROLLBACK or UNKNOWN (an exception counts as UNKNOWN, its text the
request's remark). A transaction left UNKNOWN, or whose END_TRANSACTION was lost, is checked back
by the broker after its ``transactionTimeOut``: CHECK_TRANSACTION_STATE comes over any of the
producer's connections to that broker, ``check(message)`` answers, and its answer ends it the
same way (``fromTransactionCheck``). The broker keeps checking an UNKNOWN answer, up to its
``transactionCheckMax``, then discards the half.
"""
from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rocketbox.client.errors import MQClientError
from rocketbox.client.instance import ClientInstance
from rocketbox.client.message import Message, MessageExt, SendResult, decode_messages
from rocketbox.client.producer import Producer
from rocketbox.net import client as net
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.store import message as codec

log = logging.getLogger("rocketbox.client")
COMMIT, ROLLBACK, UNKNOWN = "COMMIT", "ROLLBACK", "UNKNOWN"
_DECISION = {COMMIT: codec.TX_COMMIT, ROLLBACK: codec.TX_ROLLBACK, UNKNOWN: 0}
LocalTransaction = Callable[[Message, Any], "str | Awaitable[str]"]
CheckListener = Callable[[MessageExt], "str | Awaitable[str]"]


@dataclass
class TransactionSendResult(SendResult):
    """A half message's SendResult and what the local transaction answered."""
    local_state: str = UNKNOWN


class TransactionProducer(Producer):
    """A producer of transactional messages for ``group`` (Java's ``TransactionMQProducer``);
    ``check(message)`` answers the broker's check-backs of undecided transactions with COMMIT,
    ROLLBACK or UNKNOWN (a coroutine function or a plain one)."""

    def __init__(self, group: str, namesrv: str, check: CheckListener, *, send_timeout_s: float = 3.0,
                 retries: int = 2, instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, send_timeout_s=send_timeout_s, retries=retries, instance=instance)
        self.check = check

    async def start(self) -> TransactionProducer:
        """Connect (lazily), start the heartbeats and answer check-backs for the group. -> self."""
        self.instance.transaction_checks[self.group] = self._checked
        await super().start()
        return self

    async def shutdown(self) -> None:
        """Stop answering check-backs, then shut down as a Producer."""
        self.instance.transaction_checks.pop(self.group, None)
        await super().shutdown()

    async def send_in_transaction(self, msg: Message, local: LocalTransaction, arg: Any = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local(msg, arg)`` once it is stored, and end the
        transaction with its answer -> the send's result and that answer."""
        props = msg.wire_properties()
        props.pop("DELAY", None)
        props.update(TRAN_MSG="true", PGROUP=self.group)
        result = await self._send(msg.topic, props, msg.body, msg.flag, False, None, oneway=False,
                                  sys_flag=codec.TX_PREPARED)
        assert result is not None
        state, remark = ROLLBACK, None
        if result.status == "SEND_OK":
            try:
                state = _state(await _maybe_await(local(msg, arg)))
            except Exception as e:           # the local transaction failed: the broker asks again later
                state, remark = UNKNOWN, f"executeLocalTransactionBranch exception: {e!r}"[:500]
        addr = (await self._route(msg.topic))[0].masters.get(result.queue.broker_name)
        if addr is not None:
            await self._end(addr, result.queue_offset, result.offset_msg_id, props["UNIQ_KEY"], state, remark, False)
        return TransactionSendResult(result.status, result.msg_id, result.offset_msg_id, result.queue,
                                     result.queue_offset, state)

    async def _end(self, addr: str, queue_offset: int, offset_msg_id: str, msg_id: str, state: str,
                   remark: str | None, checked: bool) -> None:
        """END_TRANSACTION, oneway (a failure to send is logged: the broker checks back)."""
        try:
            phys = codec.parse_offset_msg_id(offset_msg_id)[2]
        except ValueError:
            log.warning("transaction %s: the broker's offsetMsgId %r does not decode; left to its check-back",
                        msg_id, offset_msg_id)
            return
        ext = {"producerGroup": self.group, "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(phys),
               "commitOrRollback": str(_DECISION[state]), "fromTransactionCheck": "true" if checked else "false",
               "msgId": msg_id, "transactionId": msg_id}
        try:
            conn = await self.instance.connection(addr)
            conn.oneway(Command(R.END_TRANSACTION, ext, remark=remark))
        except (MQClientError, OSError) as e:
            log.warning("transaction %s: END_TRANSACTION to %s not sent (%s); left to its check-back", msg_id, addr, e)

    async def _checked(self, cmd: Command, conn: net.Connection) -> None:
        """A broker's CHECK_TRANSACTION_STATE for this group: ``check`` answers, END_TRANSACTION
        goes back over the connection it came on."""
        try:
            msg = decode_messages(cmd.body)[0]
        except (ValueError, IndexError) as e:
            log.warning("a transaction check-back does not decode: %s", e)
            return
        try:
            state = _state(await _maybe_await(self.check(msg)))
        except Exception as e:
            log.warning("the check of transaction %s failed: %r", msg.msg_id, e)
            state = UNKNOWN
        await self._end(conn.addr, int(cmd.ext.get("tranStateTableOffset", -1)),
                        cmd.ext.get("offsetMsgId") or msg.offset_msg_id, cmd.ext.get("msgId") or msg.msg_id,
                        state, None, True)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _state(value: Any) -> str:
    state = str(value).upper()
    if state in ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"):       # Java's names
        state = {"COMMIT_MESSAGE": COMMIT, "ROLLBACK_MESSAGE": ROLLBACK, "UNKNOW": UNKNOWN}[state]
    if state not in _DECISION:
        raise ValueError(f"a transaction's state is COMMIT, ROLLBACK or UNKNOWN, not {value!r}")
    return state

