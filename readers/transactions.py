"""END_TRANSACTION (37): a producer commits or rolls back its half message (FACTS §3.7, §9.3,
FACTS-wave2 §4; broker:processor/EndTransactionProcessor.java).

As 4.9.8: on a slave it is answered 11; ``commitOrRollback`` 0 (unknown) or any other value than
8 (commit) and 12 (rollback) gets no answer; the half is read at ``commitLogOffset`` (none there:
1 ``Find prepared transaction message failed``) and checked against the request (1 ``The producer
group wrong``, ``The transaction state table offset wrong``, ``The commit log offset wrong``).
A commit stores the message in its real topic and queue, then the op record that ends the half;
a rollback the op record alone (``store/transaction.py``). The Java producer sends it oneway.

Beyond 4.9.8, which stores a commit again for each END_TRANSACTION that repeats one: both go to
the writer as one TX_END entry, which it appends only while the transaction is open
(``writer/transactions.py``), so a transaction ends once whichever readers its END_TRANSACTIONs
reach; a repeated one is answered as the first was (SUCCESS) and stores nothing. The half is read
bounded by ``written``, which the writer moves before it answers the half's send, so an
END_TRANSACTION right behind its SEND_OK finds it on any reader.
"""
from __future__ import annotations

import logging

from rocketbox.net.pending import next_opaque
from rocketbox.remoting import headers
from rocketbox.remoting.codec import RPC_ONEWAY, Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import txend
from rocketbox.shm.layout import S
from rocketbox.shm.roster import GROUP, HOP
from rocketbox.store import message, transaction

log = logging.getLogger("rocketbox.reader")


class TransactionProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view = broker, broker.cfg, broker.link, broker.view
        self.topics, self.ctl = broker.topics, broker.sh.control
        self.producers = broker.clients.producers
        self.turn = 0                                 # which producer connection is asked next
        self.counts = broker.sh.slots[broker.slot]   # (its slot's row: the transactions it ended)

    def handlers(self) -> dict:
        return {R.END_TRANSACTION: self.end, R.CHECK_TRANSACTION_STATE: self.relay_check}

    def relay_check(self, cmd, _conn):
        """CHECK_TRANSACTION_STATE from the scheduler (marked HOP, naming the producer group):
        passed on, oneway, to one of this reader's connections of a producer of that group, in
        turn (as 4.9.8's ProducerManager#getAvailableChannel) -> SUCCESS, or SYSTEM_ERROR when
        this reader has none now. From anyone else, a code a broker does not serve."""
        if HOP not in cmd.ext:
            return cmd.response(RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        group = cmd.ext.get(GROUP, "")
        conns = [c for c, _who, _ms in self.producers.groups.get(group, {}).values()]
        if not conns:
            return cmd.response(RC.SYSTEM_ERROR, f"no producer of group {group} is connected to this reader")
        self.turn += 1
        conn = conns[self.turn % len(conns)]
        conn.send(Command(cmd.code, {k: v for k, v in cmd.ext.items() if k not in (HOP, GROUP)}, cmd.body,
                          opaque=next_opaque(), flag=RPC_ONEWAY, language="JAVA"))
        return cmd.response()

    async def end(self, cmd, conn):
        h = headers.decode(cmd)
        if self.cfg.slave:
            return cmd.response(RC.SLAVE_NOT_AVAILABLE, None)
        decision = h["commitOrRollback"]
        if decision not in (transaction.COMMIT, transaction.ROLLBACK):
            return None                               # unknown (0) and anything else: no answer, as 4.9.8
        half = txend.half_at(self.view, h["commitLogOffset"])
        if half is None:
            return cmd.response(RC.SYSTEM_ERROR, txend.NOT_FOUND)
        why = self._mismatch(half.head, half.props, h)
        if why is not None:
            return cmd.response(RC.SYSTEM_ERROR, why)
        ended = await txend.end(self.link, self.topics, half, decision == transaction.COMMIT)
        if not ended.ok:
            return cmd.response(RC.TOPIC_NOT_EXIST if ended.code == "TOPIC_NOT_EXIST" else RC.SYSTEM_ERROR, ended.why)
        if ended.before:
            log.info("END_TRANSACTION for the half at queue offset %d (%s) repeated: it was ended before",
                     half.head.queue_offset, h["msgId"])
            return cmd.response(RC.SUCCESS, None)
        self.counts[S.TX_COMMITS if decision == transaction.COMMIT else S.TX_ROLLBACKS] += 1
        return cmd.response(RC.SUCCESS, None)

    @staticmethod
    def _mismatch(head, props: bytes, h) -> str | None:
        """4.9.8's checkPrepareMessage: what of the request does not match the half, or None."""
        if (message.property_value(props, transaction.PGROUP) or b"").decode("utf-8", "replace") != h["producerGroup"]:
            return "The producer group wrong"
        if head.queue_offset != h["tranStateTableOffset"]:
            return "The transaction state table offset wrong"
        if head.phys_offset != h["commitLogOffset"]:
            return "The commit log offset wrong"
        return None
