"""A reader process (``appliance run reader-<i>``): one asyncio/uvloop remoting server on
127.0.0.1:<readerPortBase + i> behind HAProxy, serving clients from the shared store.

Handlers come from one processor per concern: sends (send.py), pulls with long polling (pull.py),
client management and group membership (clients.py), offsets and administration (admin.py).  All
shared state lives in shared memory or with its single writer, so a client gets the same answers
whichever reader HAProxy gives it.  Reader 0 registers the broker with the name servers every 30 s
and after a back-off while one of them refuses, and the changed topics when the topic table
changes; a reader that creates a topic registers it at once.

Stop (SIGTERM): stop accepting, let sends already handed to the writer get their replies (up to
5 s), unregister from the name servers when the whole appliance is stopping, close.
"""
from __future__ import annotations

import asyncio
import logging
import time

from rocketbox.net.role import ServerRole
from rocketbox.net.server import RemotingServer
from rocketbox.readers.admin import AdminProcessor
from rocketbox.readers.clients import ClientProcessor
from rocketbox.readers.metadata import MetadataProcessor
from rocketbox.readers.offsets import OffsetProcessor
from rocketbox.readers.pull import PullProcessor
from rocketbox.readers.query import QueryProcessor
from rocketbox.readers.registration import PERIOD_S, Registrar, addresses
from rocketbox.readers.reply import ReplyProcessor
from rocketbox.readers.send import SendProcessor
from rocketbox.readers.sendback import SendBackProcessor
from rocketbox.readers.timers import TimerProcessor
from rocketbox.readers.transactions import TransactionProcessor
from rocketbox.shm.context import ReaderContext
from rocketbox.shm.layout import C
from rocketbox.shm.stats import Rates

log = logging.getLogger("rocketbox.reader")
TICK_S = 1.0
DRAIN_S = 5.0


class ReaderService(ReaderContext, ServerRole):
    def __init__(self, cfg, shared, index: int):
        ReaderContext.__init__(self, cfg, shared)
        ServerRole.__init__(self)
        self.index = index

    # ------------------------------------------------------------ serving
    async def serve(self) -> None:
        self.open_context()
        self.rates = Rates(self.sh)                          # GET_BROKER_RUNTIME_INFO's TPS
        self.clients = ClientProcessor(self)
        self.members = self.clients.members
        self.pulls = PullProcessor(self)
        handlers = {}
        sends = SendProcessor(self)
        self.replies = ReplyProcessor(self, sends)
        for proc in (sends, SendBackProcessor(self), self.pulls, self.clients, AdminProcessor(self),
                     OffsetProcessor(self), TimerProcessor(self), QueryProcessor(self),
                     TransactionProcessor(self), MetadataProcessor(self), self.replies):
            handlers.update(proc.handlers())
        server = RemotingServer(f"reader-{self.index}", handlers, on_close=self.clients.connection_closed)
        registrar = Registrar(self.cfg, self.sh.views) if addresses(self.cfg) else None
        if registrar is not None:      # a topic created here is answered once the name servers have it
            self.link.on_topic_change = registrar.changed
        try:
            await server.start("127.0.0.1", self.cfg.reader_port(self.index))
            log.info("reader %d listening on 127.0.0.1:%d (ring slot %d)", self.index, server.port, self.link.slot)
            await self._tick_until_stopped(registrar)
        finally:
            await server.close()
            await self._drain()
            if registrar is not None:
                if self.sh.control[C.STOPPING] and self.index == 0:
                    await registrar.unregister_all()
                registrar.close()
            self.clients.close()
            self.replies.close()
            self.close_context()

    async def _tick_until_stopped(self, registrar) -> None:
        registered_at, topic_version, pending = 0.0, -1, None
        while not self.stop_requested:
            if registrar is not None and self.index == 0 and (pending is None or pending.done()):
                version = int(self.sh.control[C.TOPIC_VERSION])
                # the whole table every period, and to a name server that refused (not up yet,
                # restarting) after its back-off; what changed meanwhile, when the table changes
                if registrar.retry_due() or time.monotonic() - registered_at >= PERIOD_S:
                    topic_version, registered_at = version, time.monotonic()
                    pending = self.loop.create_task(registrar.register_all())
                elif version != topic_version:
                    topic_version = version
                    pending = self.loop.create_task(registrar.register_changes())
            await self.sleep(TICK_S)
            self.clients.tick(int(time.time() * 1000))
            self.pulls.count_uncounted()
            self.rates.sample()
            self.settle()

    def _posted(self) -> None:
        super()._posted()
        self.clients.follow_members()        # another reader's members moved: notify now

    def settle(self) -> None:
        super().settle()
        self.pulls.settle()                  # held pulls whose queues grew

    async def _drain(self) -> None:
        deadline = time.monotonic() + DRAIN_S
        while self.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
