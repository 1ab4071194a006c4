"""CANCEL_TIMER (rocketbox's own request code, ``remoting/codes.py``): cancel a pending timer by
its msgId, so that it is never delivered (``store/timer.py``; what neither 4.x nor 5.x offers a
client).

The msgId is the one the producer's send returned (its ``UNIQ_KEY``, found through the IndexFile
under ``rmq_sys_wheel_timer#<msgId>``) or the stored copy's offsetMsgId.  The reader appends a
marker naming the timer's CommitLog offset, waits until the dispatcher has put it in the timer
queue, and answers:

- SUCCESS when that happened before the timer's time: the scheduler reads the queue after it
  reads the clock and before it picks due timers, so it reads the marker before it could pick
  the timer;
- MESSAGE_ILLEGAL (13) when the timer was due first (it is delivered, or may be), 5.x's code for a
  cancellation not later than now;
- QUERY_NOT_FOUND (22) when no timer has that msgId.

A timer stored again meanwhile (rolled past retention) is found again after the marker and
cancelled too.
"""
from __future__ import annotations

import asyncio
import time

from rocketbox.remoting import headers
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.shm.layout import C
from rocketbox.store import indexfile, message, timer
from rocketbox.store.errors import StoreError

DISPATCH_WAIT_S = 5.0          # a marker not dispatched in this long: answered SYSTEM_BUSY


class TimerProcessor:
    def __init__(self, broker):
        self.b, self.cfg, self.link, self.view, self.ctl = broker, broker.cfg, broker.link, broker.view, broker.sh.control
        self.topics = broker.topics

    def handlers(self) -> dict:
        return {R.CANCEL_TIMER: self.cancel}

    def cancel(self, cmd, _conn):
        return self._cancel(cmd, headers.decode(cmd)["msgId"])

    async def _cancel(self, cmd, msg_id: str):
        found = self._pending(msg_id, -1)
        if found is None:
            how = "" if self.cfg.messageIndexEnable else " (messageIndexEnable is false: only an offsetMsgId is found)"
            return cmd.response(RC.QUERY_NOT_FOUND, f"no timer message with msgId {msg_id}{how}")
        cancelled = -1
        while found is not None:
            phys, when, real_topic, uniq = found
            now = int(time.time() * 1000)
            if when <= now:
                return cmd.response(RC.MESSAGE_ILLEGAL, f"timer message {msg_id} was due at {when}, before the "
                                                        "cancellation: it is delivered, or is being delivered")
            tidx = self.topics.lookup(timer.TIMER_TOPIC)
            if tidx is None:
                return cmd.response(RC.SYSTEM_ERROR, f"{timer.TIMER_TOPIC} is missing from the topic table")
            ring = self.link.ring
            marker = timer.marker_record(real_topic, uniq, when, phys, now, ring.store_ip, ring.store_port)
            failed = await self.link.put(tidx, 0, timer.host_flags(ring.store_ip), marker)
            if failed is not None:
                return cmd.response(RC.SYSTEM_ERROR, f"the cancellation of {msg_id} was not stored: {failed}")
            if not await self._dispatched(int(self.ctl[C.WRITTEN])):
                return cmd.response(RC.SYSTEM_BUSY, f"the cancellation of {msg_id} is stored but not yet dispatched: "
                                                    "ask again to learn whether it came in time")
            if int(time.time() * 1000) >= when:
                return cmd.response(RC.MESSAGE_ILLEGAL, f"timer message {msg_id} was due at {when}, before the "
                                                        "cancellation took effect: it may have been delivered")
            cancelled = phys
            found = self._pending(msg_id, cancelled)          # a copy stored again meanwhile (a roll)
        return cmd.response(RC.SUCCESS, f"timer message {msg_id} (due at {when}) cancelled")

    async def _dispatched(self, end: int) -> bool:
        """Wait until the dispatcher is past CommitLog offset ``end`` (an admin request: a short
        sleep between looks costs nothing that matters)."""
        deadline = time.monotonic() + DISPATCH_WAIT_S
        while int(self.ctl[C.DISPATCHED]) < end:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.002)
        return True

    def _pending(self, msg_id: str, above: int):
        """The newest stored timer with this msgId above CommitLog offset ``above`` -> (phys,
        delivery time, real topic, its UNIQ_KEY), or None."""
        candidates = []
        try:
            ip, port, phys = message.parse_offset_msg_id(msg_id)
            if ip == self.link.ring.store_ip and port == self.link.ring.store_port:
                candidates.append(phys)
        except ValueError:
            pass
        if self.cfg.messageIndexEnable:
            candidates += indexfile.find(self.cfg.index_dir, f"{timer.TIMER_TOPIC}#{msg_id}", self.cfg.maxHashSlotNum,
                                         self.cfg.maxIndexNum)
        best = None
        for phys in sorted(set(candidates), reverse=True):
            if phys <= above or not int(self.ctl[C.MIN_PHYS]) <= phys < int(self.ctl[C.WRITTEN]):
                continue
            try:
                rec = message.decode_record(bytes(self.view.record(phys)))
            except (ValueError, StoreError):
                continue
            p = rec.properties
            if rec.topic != timer.TIMER_TOPIC or "TIMER_DEL_OFFSET" in p or "TIMER_OUT_MS" not in p:
                continue
            if phys in candidates[:1] or p.get("UNIQ_KEY") == msg_id:
                best = (phys, int(p["TIMER_OUT_MS"]), p.get("REAL_TOPIC", ""), p.get("UNIQ_KEY", msg_id))
                break
        return best
