"""5.x transactional producers on the gRPC front: their half messages, ``EndTransaction``, and the
check-back of a half left open (recovery) over their ``Telemetry`` streams.

- **The half** is stored as a 4.x producer's is (``store/transaction.py``): in
  RMQ_SYS_TRANS_HALF_TOPIC, ``TRAN_MSG`` true, its real topic and queue in its properties, and its
  producer group (``PGROUP``) the topic's name: a 5.x client names no producer group, and the 5.x
  proxy keeps its transactional producers by the topics they publish.  Its transaction id
  (``transaction_id``) names the half's CommitLog and queue offsets.
- **EndTransaction** commits or rolls it back through the writer (``shm/txend.py``), once: a repeat,
  or the check-back's answer after the producer's own, stores nothing.
- **Check-back.**  The scheduler checks an open half as it checks a 4.x one: it finds in the
  roster (``shm/roster.py``) the process holding producers of the half's group and sends it
  CHECK_TRANSACTION_STATE.  The front publishes its producers (by topic, from each Telemetry
  stream's settings) with the port of a loopback remoting listener that takes only that request,
  and passes it on to one of the group's streams as a ``RecoverOrphanedTransactionCommand``; the
  client answers with EndTransaction (source SERVER_CHECK).  The roster also makes 5.x producers
  show in GET_PRODUCER_CONNECTION_LIST and the producer-connection metrics.
"""
from __future__ import annotations

import asyncio
import logging
import os

from rocketbox.grpcfront import convert
from rocketbox.net.server import RemotingServer
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm import txend
from rocketbox.shm.layout import S
from rocketbox.shm.roster import GROUP, HOP, Roster
from rocketbox.store import message, transaction

log = logging.getLogger("rocketbox.grpcfront")
TX_PREFIX = "rbxtx1"
# apache.rocketmq.v2.Language -> the 4.x LanguageCode admin tools show (OTHER for the rest)
_LANGUAGES = {"JAVA": "JAVA", "CPP": "CPP", "DOT_NET": "DOTNET", "GOLANG": "GO", "RUST": "RUST", "PYTHON": "PYTHON",
              "PHP": "PHP", "NODE_JS": "OTHER"}


def transaction_id(phys: int, queue_offset: int) -> str:
    return f"{TX_PREFIX}.{phys:x}.{queue_offset:x}"


def parse_transaction_id(tid: str) -> tuple[int, int]:
    """-> (the half's CommitLog offset, its queue offset); ValueError for one this front never gave."""
    parts = tid.split(".")
    if len(parts) != 3 or parts[0] != TX_PREFIX:
        raise ValueError(f"transaction id {tid[:64]!r} is not valid")
    return int(parts[1], 16), int(parts[2], 16)


class Stream:
    """A client's Telemetry stream: what to write to it, and the topics it publishes."""
    __slots__ = ("out", "topics", "who")

    def __init__(self):
        self.out: asyncio.Queue = asyncio.Queue()
        self.topics: tuple[str, ...] = ()
        self.who: dict = {}


class Transactions:
    def __init__(self, front):
        self.f, self.proto = front, front.proto
        self.streams: dict[int, Stream] = {}
        self.turn = 0
        self.roster = Roster(front.sh.roster_dir, front.slot)
        self.server = RemotingServer("grpc-checks", {R.CHECK_TRANSACTION_STATE: self.relay_check})

    async def start(self) -> None:
        await self.server.start("127.0.0.1", 0)
        self.publish()

    async def close(self) -> None:
        await self.server.close()
        self.roster.close()

    def publish(self) -> None:
        """This front's producers, by the topics they publish, where the scheduler and admin
        requests find them."""
        producers: dict[str, list] = {}
        for s in self.streams.values():
            for topic in s.topics:
                producers.setdefault(topic, []).append(s.who)
        self.roster.publish({"pid": os.getpid(), "port": self.server.port, "consumers": {}, "producers": producers})

    # ------------------------------------------------------------ Telemetry streams
    def opened(self) -> Stream:
        s = Stream()
        self.streams[id(s)] = s
        return s

    def settled(self, s: Stream, settings, client_id: str, peer: str) -> None:
        """A stream's settings: the topics it publishes (a producer's) and who it is."""
        topics = tuple(sorted(t.name for t in settings.publishing.topics)) if settings.HasField("publishing") else ()
        lang = self.proto.enum_name("Language", settings.user_agent.language)
        who = {"clientAddr": peer, "clientId": client_id, "language": _LANGUAGES.get(lang or "", "OTHER"),
               "version": 0}
        if (topics, who) != (s.topics, s.who):
            s.topics, s.who = topics, who
            self.publish()

    def closed(self, s: Stream) -> None:
        self.streams.pop(id(s), None)
        if s.topics:
            self.publish()

    # ------------------------------------------------------------ the half, its end
    @staticmethod
    def half_properties(props: dict[str, str], topic: str, queue_id: int) -> bytes:
        """A 5.x transactional message's stored properties: as a 4.x half's, its group its topic."""
        props = {**props, "TRAN_MSG": "true", transaction.PGROUP.decode(): topic}
        return transaction.half_properties(message.encode_properties(props).encode(), topic, queue_id)

    async def end(self, request, _context):
        """EndTransaction: the half named by the transaction id committed or rolled back."""
        proto = self.proto
        response = proto.EndTransactionResponse()
        resolution = proto.enum_name("TransactionResolution", request.resolution)
        if resolution not in ("COMMIT", "ROLLBACK"):
            return self.f.status(response, "BAD_REQUEST", "the resolution is neither COMMIT nor ROLLBACK")
        try:
            phys, qoff = parse_transaction_id(request.transaction_id)
        except ValueError as e:
            return self.f.status(response, "INVALID_TRANSACTION_ID", str(e))
        half = txend.half_at(self.f.view, phys)
        if half is None or half.head.queue_offset != qoff or half.group != request.topic.name:
            return self.f.status(response, "INVALID_TRANSACTION_ID", f"no open transaction {request.transaction_id} "
                                                                     f"of topic {request.topic.name}")
        commit = resolution == "COMMIT"
        ended = await txend.end(self.f.link, self.f.topics, half, commit)
        if not ended.ok:
            return self.f.status(response, "TOPIC_NOT_FOUND" if ended.code == "TOPIC_NOT_EXIST" else "INTERNAL_SERVER_ERROR",
                                 ended.why)
        if not ended.before:
            self.f.sh.slots[self.f.slot][S.TX_COMMITS if commit else S.TX_ROLLBACKS] += 1
        return self.f.status(response)

    # ------------------------------------------------------------ check-back
    def relay_check(self, cmd, _conn):
        """CHECK_TRANSACTION_STATE from the scheduler (marked HOP, naming the group): passed on to
        one of the group's Telemetry streams, in turn -> SUCCESS, or SYSTEM_ERROR with none here."""
        if HOP not in cmd.ext:
            return cmd.response(RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        group = cmd.ext.get(GROUP, "")
        streams = [s for s in self.streams.values() if group in s.topics]
        if not streams:
            return cmd.response(RC.SYSTEM_ERROR, f"no 5.x producer of topic {group} is connected to the gRPC front")
        try:
            head, body, topic, props = next(message.record_fields(cmd.body or b"", "check"))
        except Exception as e:
            return cmd.response(RC.SYSTEM_ERROR, f"the half to check is not a record: {e}")
        phys, qoff = int(cmd.ext["commitLogOffset"]), int(cmd.ext["tranStateTableOffset"])
        command = self.proto.TelemetryCommand()
        recover = command.recover_orphaned_transaction_command
        recover.message.CopyFrom(convert.message_of(self.proto, head, body, topic, props, receipt_handle="", attempt=1,
                                                    invisible_ms=0))
        recover.transaction_id = transaction_id(phys, qoff)
        self.turn += 1
        streams[self.turn % len(streams)].out.put_nowait(command)
        return cmd.response()
