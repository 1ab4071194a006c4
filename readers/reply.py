"""Request-reply (4.6+; broker:processor/ReplyMessageProcessor.java): a responder's reply,
SEND_REPLY_MESSAGE (324) or _V2 (325), is pushed to the requesting client with
PUSH_REPLY_MESSAGE_TO_CLIENT (326), then stored in ``<cluster>_REPLY_TOPIC`` when
``storeReplyMessageEnable`` (default true) says so, and answered with the store's result; else
with the push's.

The requester is named by the reply's ``REPLY_TO_CLIENT`` (its client id). Its connection may be
held by another reader: the reader whose published roster (``shm/roster.py``) lists a producer
with that client id gets the push, forwarded once and marked ``HOP`` (the relay the transaction
check-back uses too) over a connection kept to that reader. A requester that is gone: SYSTEM_ERROR ``push reply message fail, channel of
<id> not found`` (stored all the same, as 4.9.8, when the reply is to be stored).
"""
from __future__ import annotations

import logging
import time

from rocketbox.net import client as net
from rocketbox.net.pending import RemotingError
from rocketbox.remoting import headers
from rocketbox.remoting.codec import Command
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.roster import HOP
from rocketbox.store import message

log = logging.getLogger("rocketbox.reader")
CLIENT_ID = "rocketboxClientId"        # with HOP: the requester's client id
PUSH_TIMEOUT_S = 3.0


class ReplyProcessor:
    def __init__(self, broker, sends):
        self.b, self.cfg, self.sends = broker, broker.cfg, sends
        self.clients = broker.clients
        self.peers: dict[int, net.Connection] = {}    # reader port -> the connection replies are relayed over

    def handlers(self) -> dict:
        return {R.SEND_REPLY_MESSAGE: self.reply, R.SEND_REPLY_MESSAGE_V2: self.reply,
                R.PUSH_REPLY_MESSAGE_TO_CLIENT: self.relay}

    async def reply(self, cmd, conn):
        h = headers.decode(cmd)
        props = message.parse_properties(h["properties"] or "")
        sender = props.get("REPLY_TO_CLIENT", "")
        push = Command(R.PUSH_REPLY_MESSAGE_TO_CLIENT, {
            "producerGroup": h["producerGroup"], "topic": h["topic"], "defaultTopic": h["defaultTopic"] or "TBW102",
            "defaultTopicQueueNums": str(h["defaultTopicQueueNums"] or 4), "queueId": str(max(h["queueId"], 0)),
            "sysFlag": str(h["sysFlag"]), "bornTimestamp": str(h["bornTimestamp"]), "flag": str(h["flag"]),
            "properties": h["properties"] or "", "reconsumeTimes": str(h["reconsumeTimes"] or 0),
            "unitMode": "false", "bornHost": conn.peer, "storeHost": f"{self.cfg.brokerIP1}:{self.cfg.listenPort}",
            "storeTimestamp": str(int(time.time() * 1000))}, cmd.body, language="JAVA")
        why = await self._push(sender, push)
        if why is not None:
            log.warning("%s", why)
        if self.cfg.storeReplyMessageEnable:
            return self.sends.send(cmd, conn)          # answered with the store's result
        return cmd.response(RC.SYSTEM_ERROR, why) if why else cmd.response()

    async def _push(self, client_id: str, push: Command) -> str | None:
        """Push the reply to ``client_id``'s connection, here or through the reader holding it
        -> None once the client took it, else why not."""
        conn = self._connection(client_id)
        try:
            if conn is not None:
                got = await conn.invoke(push, PUSH_TIMEOUT_S)
            else:
                port = next((doc.get("port") for doc in self.clients._others()
                             if any(w.get("clientId") == client_id for ws in (doc.get("producers") or {}).values()
                                    for w in ws)), None)
                if port is None:
                    return f"push reply message fail, channel of <{client_id}> not found."
                push.ext.update({HOP: str(self.b.slot), CLIENT_ID: client_id})
                got = await self._relay(port, push)
        except (OSError, RemotingError) as e:
            return f"push reply message to <{client_id}> failed: {e}"
        return None if got.code == RC.SUCCESS else f"push reply message to <{client_id}> failed: {got.remark}"

    async def _relay(self, port: int, push: Command) -> Command:
        """``push`` through the reader at ``port``, over a connection kept for the next reply (one
        that has closed meanwhile, a restarted reader's, is opened again once)."""
        for attempt in (1, 2):
            peer = self.peers.get(port)
            if peer is None or not peer.is_open:
                peer = self.peers[port] = await net.connect(f"127.0.0.1:{port}")
            try:
                return await peer.invoke(push, PUSH_TIMEOUT_S + 1.0)
            except (OSError, RemotingError):
                self.peers.pop(port, None)
                if peer.is_open or attempt == 2:         # (asked and not answered: not asked again)
                    peer.close()
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        for peer in self.peers.values():
            peer.close()
        self.peers.clear()

    def _connection(self, client_id: str):
        for clients in self.clients.producers.groups.values():
            got = clients.get(client_id)
            if got is not None:
                return got[0]
        return None

    async def relay(self, cmd, _conn):
        """A reply another reader forwards (marked HOP) to a requester connected here; from anyone
        else, a code a broker does not serve."""
        if HOP not in cmd.ext:
            return cmd.response(RC.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        client_id = cmd.ext.get(CLIENT_ID, "")
        conn = self._connection(client_id)
        if conn is None:
            return cmd.response(RC.SYSTEM_ERROR, f"push reply message fail, channel of <{client_id}> not found.")
        push = Command(cmd.code, {k: v for k, v in cmd.ext.items() if k not in (HOP, CLIENT_ID)}, cmd.body,
                       language="JAVA")
        try:
            got = await conn.invoke(push, PUSH_TIMEOUT_S)
        except (OSError, RemotingError) as e:
            return cmd.response(RC.SYSTEM_ERROR, f"push reply message to <{client_id}> failed: {e}")
        return cmd.response(got.code, got.remark)
