"""One scrape's metric families, read from what the roles already publish (docs/METRICS.md): the
shared state's control block, queue, offset, pull and member tables, and each role's process.
Nothing here is counted on the send or pull path; a scrape costs the metrics role alone.

RocketMQ 5.x's broker-native names come first (``rocketmq_*``, the labels of
``BrokerMetricsConstant``: cluster, node_type, node_id, then topic and consumer_group), as
counters where 5.x has counters, so its dashboards work; then what only this appliance has
(``rocketbox_*``).

Counts and their meaning:
- messages in (a topic's): the sum of its queues' max offsets, every message ever stored in them
  (a counter: it never goes down, and starts where the store left it);
- messages out (a topic, a group): what the group's pulls found on its queues since this start
  (``offset_pulls``, the figures of GET_CONSUME_STATS' consumeTps);
- lag (a topic, a group the topic has committed offsets of): its queues' max offsets less the
  group's committed ones (0 on a queue it has not committed on), as GET_CONSUME_STATS reports it.
"""
from __future__ import annotations

import json
import os
import time

import psutil

from rocketbox.metrics.exposition import Family
from rocketbox.shm import histogram, roster
from rocketbox.shm.layout import HISTOGRAMS, C, H, S
from rocketbox.shm.tables import table_use
from rocketbox.store import delay, quarantine, scheduled, timer, transaction
from rocketbox.store.view import StoreView

SYSTEM_TOPICS = frozenset({delay.SCHEDULE_TOPIC, timer.TIMER_TOPIC, transaction.HALF_TOPIC, transaction.OP_TOPIC,
                           transaction.CHECK_MAX_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "TBW102",
                           "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC"})
RETRY, DLQ = "%RETRY%", "%DLQ%"


def _is_system(topic: str) -> str:
    return "true" if topic in SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "RMQ_SYS_")) else "false"


def _decoded(names) -> list[str]:
    return [n.decode("utf-8", "replace") for n in names.tolist()]


class Collector:
    """Reads one appliance's state for each scrape.  ``roles``: the role names whose processes it
    reports, found by their pid files in ``run_dir``."""

    def __init__(self, cfg, sh, roles: list[str]):
        self.cfg, self.sh, self.roles = cfg, sh, roles
        self.common = {"cluster": cfg.brokerClusterName, "node_type": "broker", "node_id": cfg.brokerName}
        self.procs: dict[str, psutil.Process] = {}
        self.view: StoreView | None = None        # opened at the first lag to time (rocketmq_consumer_lag_latency)

    def families(self) -> list[Family]:
        queues, nbytes = self._queues()
        return [*self._messages(queues, nbytes), *self._groups(queues), *self._clients(), *self._store(),
                *self._histograms(), *self._rings(), *self._schedule(queues), *self._haproxy(), *self._roles()]

    def _queues(self) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
        """The queue table, read once a scrape: topic -> {queue id: max offset}, and topic -> the
        bytes put in its queues since this start."""
        views, nq = self.sh.views, int(self.sh.control[C.QUEUE_COUNT])
        queues: dict[str, dict[int, int]] = {}
        nbytes: dict[str, int] = {}
        for topic, qid, count, size in zip(_decoded(views["queue_names"][:nq]), views["queue_ids"][:nq].tolist(),
                                           views["queue_max"][:nq].tolist(), views["queue_bytes"][:nq].tolist()):
            queues.setdefault(topic, {})[qid] = count
            nbytes[topic] = nbytes.get(topic, 0) + size
        return queues, nbytes

    def _sample(self, family: Family, value, **labels: str) -> None:
        family.add(value, **self.common, **labels)

    # ------------------------------------------------------------ messages and topics
    def _messages(self, queues: dict[str, dict[int, int]], nbytes: dict[str, int]) -> list[Family]:
        msgs_in = Family("rocketmq_messages_in_total", "counter",
                         "Messages stored in the topic's consume queues, ever (the sum of their max offsets)")
        bytes_in = Family("rocketmq_throughput_in_total", "counter",
                          "Bytes of the records put in the topic's consume queues since the appliance started")
        dlq = Family("rocketmq_send_to_dlq_messages_total", "counter",
                     "Messages the group's consumers gave up on, stored in its dead-letter topic, ever")
        for topic, maxes in sorted(queues.items()):
            labels = {"topic": topic, "is_system": _is_system(topic)}
            self._sample(msgs_in, sum(maxes.values()), **labels)
            self._sample(bytes_in, nbytes.get(topic, 0), **labels)
            if topic.startswith(DLQ):
                self._sample(dlq, sum(maxes.values()), consumer_group=topic[len(DLQ):])
        bytes_out = Family("rocketmq_throughput_out_total", "counter",
                           "Bytes the pulls transferred since the appliance started (all topics and groups)")
        self._sample(bytes_out, int(self.sh.slots[:, S.PULLED_BYTES].sum()))
        topics = Family("rocketmq_topic_number", "gauge", "Topics in the broker's topic table")
        self._sample(topics, int(self.sh.control[C.TOPIC_COUNT]))
        return [msgs_in, bytes_in, bytes_out, dlq, topics, *self._transactions(queues)]

    def _transactions(self, queues: dict[str, dict[int, int]]) -> list[Family]:
        """Half messages not yet ended (each half is stored once and ended by one op record), and
        the transactions END_TRANSACTION committed and rolled back since this start."""
        half = Family("rocketmq_half_messages", "gauge", "Transactions' half messages neither committed nor rolled back")
        stored, ended = (sum(queues.get(t, {}).values()) for t in (transaction.HALF_TOPIC, transaction.OP_TOPIC))
        self._sample(half, max(0, stored - ended))
        commits = Family("rocketmq_commit_messages_total", "counter", "Transactions committed since this start")
        self._sample(commits, int(self.sh.slots[:, S.TX_COMMITS].sum()))
        rollbacks = Family("rocketmq_rollback_messages_total", "counter", "Transactions rolled back since this start")
        self._sample(rollbacks, int(self.sh.slots[:, S.TX_ROLLBACKS].sum()))
        return [half, commits, rollbacks]

    # ------------------------------------------------------------ producers
    def _clients(self) -> list[Family]:
        """Producer clients (each once, over every reader), by language and version, from what
        the readers publish of their clients (``shm/roster.py``)."""
        slots = self.sh.slots
        owners = {i: pid for i, pid in enumerate(slots[:, S.OWNER_PID].tolist()) if pid}
        seen: dict[str, tuple[str, str]] = {}
        for doc in roster.published(self.sh.roster_dir, owners):
            for conns in (doc.get("producers") or {}).values():
                for c in conns:
                    seen.setdefault(str(c.get("clientId")), (str(c.get("language", "")), str(c.get("version", ""))))
        by: dict[tuple[str, str], int] = {}
        for who in seen.values():
            by[who] = by.get(who, 0) + 1
        producers = Family("rocketmq_producer_connections", "gauge",
                           "Producer clients with a live heartbeat (over every reader), by language and version")
        for (language, version), n in sorted(by.items()):
            self._sample(producers, n, language=language, version=version)
        return [producers]

    # ------------------------------------------------------------ consumer groups
    def _groups(self, queues: dict[str, dict[int, int]]) -> list[Family]:
        views, no = self.sh.views, int(self.sh.control[C.OFFSET_COUNT])
        pulls = views["offset_pulls"][:, :no].sum(axis=0).tolist()
        found: dict[tuple[str, str], int] = {}                   # (topic, group) -> messages its pulls found
        committed: dict[tuple[str, str], dict[int, int]] = {}    # (topic, group) -> {queue id: committed offset}
        for key, qid, offset, n in zip(_decoded(views["offset_keys"][:no]), views["offset_qids"][:no].tolist(),
                                       views["offset_values"][:no].tolist(), pulls):
            topic, _, group = key.partition("@")
            found[(topic, group)] = found.get((topic, group), 0) + n
            committed.setdefault((topic, group), {})[qid] = offset
        msgs_out = Family("rocketmq_messages_out_total", "counter",
                          "Messages the group's pulls found on the topic since the appliance started")
        lag = Family("rocketmq_consumer_lag_messages", "gauge",
                     "Messages in the topic's queues past the group's committed offsets")
        latency = Family("rocketmq_consumer_lag_latency", "gauge",
                         "How long the oldest message the group has not consumed on the topic has waited, ms (0: none)")
        now_ms = int(time.time() * 1000)
        for (topic, group), done in sorted(committed.items()):
            labels = {"topic": topic, "consumer_group": group, "is_retry": "true" if topic.startswith(RETRY) else "false"}
            self._sample(msgs_out, found[(topic, group)], **labels)
            # over every queue of the topic, one the group has not committed on from 0 (as GET_CONSUME_STATS)
            behind = {qid: max(done.get(qid, 0), 0) for qid, hi in queues.get(topic, {}).items()
                      if hi > max(done.get(qid, 0), 0)}
            self._sample(lag, sum(queues[topic][qid] - at for qid, at in behind.items()), **labels)
            oldest = self._oldest(topic, behind)
            self._sample(latency, max(0, now_ms - oldest) if oldest is not None else 0, **labels)
        members = views["clients"]
        live = members[members["heartbeat_ms"] != 0]
        by_group: dict[str, int] = {}
        for group in _decoded(live["group"]):
            by_group[group] = by_group.get(group, 0) + 1
        connections = Family("rocketmq_consumer_connections", "gauge",
                             "Consumer clients of the group with a live heartbeat (over every reader)")
        for group, n in sorted(by_group.items()):
            self._sample(connections, n, consumer_group=group)
        groups = Family("rocketmq_consumer_group_number", "gauge",
                        "Consumer groups with committed offsets or live members")
        self._sample(groups, len({g for _t, g in committed} | set(by_group)))
        return [msgs_out, lag, latency, connections, groups]

    def _oldest(self, topic: str, behind: dict[int, int]) -> int | None:
        """The earliest store time of the messages at the offsets ``behind`` (queue id -> the first
        offset not consumed; past retention: the queue's first kept), read from the store."""
        if not behind:
            return None
        if self.view is None:
            self.view = StoreView(self.cfg, self.sh, name="metrics").open()
        times = []
        for qid, at in behind.items():
            lo = (self.view.offsets(topic, qid) or (0, 0))[0]
            if (ts := self.view.stored_at(topic, qid, max(at, lo))) is not None:
                times.append(ts)
        return min(times, default=None)

    def close(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    # ------------------------------------------------------------ the store
    def _store(self) -> list[Family]:
        ctl, cfg = self.sh.control, self.cfg
        written, dispatched, flushed = int(ctl[C.WRITTEN]), int(ctl[C.DISPATCHED]), int(ctl[C.FLUSHED])
        offsets = Family("rocketbox_commitlog_offset_bytes", "gauge",
                         "CommitLog offsets: written (the commit point), dispatched, flushed, min (oldest kept)")
        for what, value in (("written", written), ("dispatched", dispatched), ("flushed", flushed),
                            ("min", int(ctl[C.MIN_PHYS]))):
            self._sample(offsets, value, offset=what)
        lag = Family("rocketbox_dispatch_lag_bytes", "gauge", "CommitLog bytes written but not yet dispatched")
        self._sample(lag, max(0, written - dispatched))
        lag_s = Family("rocketbox_dispatch_lag_seconds", "gauge",
                       "How much older the last dispatched record is than the last written one (0: caught up)")
        behind = written > dispatched and int(ctl[C.DISPATCHED_TS])
        self._sample(lag_s, max(0, int(ctl[C.WRITTEN_TS]) - int(ctl[C.DISPATCHED_TS])) / 1000 if behind else 0.0)
        flush_lag = Family("rocketbox_flush_lag_bytes", "gauge", "CommitLog bytes written but not yet flushed")
        self._sample(flush_lag, max(0, written - flushed))
        disk = Family("rocketbox_disk_used_ratio", "gauge",
                      "How full each store partition is (the cleaner's last look; -1: unknown)")
        for part, field in (("commitlog", C.DISK_CL_PPM), ("consumequeue", C.DISK_CQ_PPM), ("index", C.DISK_INDEX_PPM)):
            ppm = int(ctl[field])
            self._sample(disk, -1.0 if ppm < 0 else ppm / 1e6, partition=part)
        limits = Family("rocketbox_disk_limit_ratio", "gauge",
                        "diskSpaceWarningLevelRatio (sends refused above it) and diskMaxUsedSpaceRatio")
        self._sample(limits, cfg.diskSpaceWarningLevelRatio / 100, limit="warning")
        self._sample(limits, cfg.diskMaxUsedSpaceRatio / 100, limit="retention")
        refusing = Family("rocketbox_sends_refused", "gauge",
                          "1 while sends are refused: a full disk, or no room for a consume-queue file")
        self._sample(refusing, int(bool(ctl[C.DISK_FULL]) or bool(ctl[C.DISPATCH_NO_ROOM])))
        contained = Family("rocketbox_records_contained_total", "counter",
                           "Records a role stepped over since this start (logged with their offsets)")
        self._sample(contained, int(ctl[C.DISPATCH_UNINDEXED]), what="unindexed")
        self._sample(contained, int(ctl[C.DISPATCH_UNQUEUED]), what="unqueued")
        tables = Family("rocketbox_table_entries", "gauge", "Shared tables: entries in use and capacity")
        for t in table_use(self.sh.views, ctl):
            self._sample(tables, t.used, table=t.name, of="used")
            self._sample(tables, t.capacity, table=t.name, of="capacity")
        pulls = Family("rocketbox_pulls_total", "counter", "Pulls (each try of a held one) since this start")
        slots = self.sh.slots
        self._sample(pulls, int(slots[:, S.PULLS_FOUND].sum()), result="found")
        self._sample(pulls, int(slots[:, S.PULLS_MISSED].sum()), result="missed")
        return [offsets, lag, lag_s, flush_lag, disk, limits, refusing, contained, tables, pulls,
                *self._retention(), *self._replication()]

    def _retention(self) -> list[Family]:
        """What retention deleted, and what damage the quarantine keeps."""
        ctl, cfg = self.sh.control, self.cfg
        retention = Family("rocketbox_retention_unconsumed_total", "counter",
                           "Messages retention deleted before a subscribed group consumed them, since this start")
        self._sample(retention, int(ctl[C.RETENTION_UNCONSUMED]))
        deleted = Family("rocketbox_retention_deleted_files_total", "counter",
                         "CommitLog files retention deleted since this start: for their age, or because the disk was full")
        forced = int(ctl[C.RETENTION_FORCED])
        self._sample(deleted, int(ctl[C.RETENTION_FILES]) - forced, why="expired")
        self._sample(deleted, forced, why="disk_full")
        quarantined = Family("rocketbox_quarantined_records", "gauge",
                             "Damaged CommitLog spans kept in the quarantine, by who found them (appliance quarantine)")
        by: dict[str, int] = {}
        try:
            entries = quarantine.load(cfg.root)
        except (OSError, ValueError):            # (a list that does not parse: appliance quarantine says which)
            entries = []
        for entry in entries:
            who = str(entry.get("foundBy", "unknown"))
            by[who] = by.get(who, 0) + 1
        for who, n in sorted(by.items()):
            self._sample(quarantined, n, found_by=who)
        return [retention, deleted, quarantined]

    def _replication(self) -> list[Family]:
        """A master's slaves: the one furthest behind (the control block), and each one."""
        ctl = self.sh.control
        slaves = Family("rocketbox_slave_lag_bytes", "gauge",
                        "Bytes the slave furthest behind lacks (0: none connected)")
        self._sample(slaves, int(ctl[C.SLAVE_LAG_BYTES]))
        each_bytes = Family("rocketbox_replica_lag_bytes", "gauge", "Bytes each connected slave lacks")
        each_s = Family("rocketbox_replica_lag_seconds", "gauge",
                        "How long ago the first byte each connected slave lacks was written")
        for row in self._slaves():
            self._sample(each_bytes, int(row.get("lag_bytes", 0)), slave=str(row.get("slave")))
            self._sample(each_s, int(row.get("lag_ms", 0)) / 1000, slave=str(row.get("slave")))
        return [slaves, each_bytes, each_s]

    def _slaves(self) -> list[dict]:
        """What a master's replicator last wrote of its slaves (none: no file, or no replicator)."""
        if not self.sh.control[C.SLAVE_COUNT]:
            return []
        try:
            with open(self.sh.slaves_path, "rb") as f:
                rows = json.loads(f.read())
        except (OSError, ValueError):
            return []
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    # ------------------------------------------------------------ histograms, rings, the scheduler
    def _histograms(self) -> list[Family]:
        """The roles' histograms (``shm/histogram.py``); latencies in seconds."""
        out = []
        for index, name, what in ((H.PUT_LATENCY, "rocketbox_put_latency_seconds",
                                   "A commit pass (rings read to commit point), once for each record it appended"),
                                  (H.RING_WAIT, "rocketbox_ring_wait_seconds",
                                   "A PUT slab's wait in its request ring before the writer's pass, once per record"),
                                  (H.COMMIT_RECORDS, "rocketbox_commit_records",
                                   "Records a commit pass was asked to append (the group commit's size)"),
                                  (H.FLUSH_LATENCY, "rocketbox_flush_latency_seconds", "A CommitLog flush's fdatasyncs"),
                                  (H.MESSAGE_SIZE, "rocketmq_message_size",
                                   "Stored size in bytes of each record put in a consume queue since this start")):
            _n, _w, unit, bounds, _m = HISTOGRAMS[index]
            scale = 10**6 if unit == "us" else 1          # (µs shown as seconds; counts and bytes as they are)
            family = Family(name, "histogram", what, buckets=tuple(b / scale if scale != 1 else b for b in bounds))
            buckets, total, _largest = histogram.read(self.sh.views, index)
            self._sample(family, (buckets, total / scale if scale != 1 else total))
            out.append(family)
        return out

    def _rings(self) -> list[Family]:
        """Each claimed slot's request and response rings: bytes waiting in them, and their size."""
        rings = Family("rocketbox_ring_bytes", "gauge",
                       "A claimed slot's ring: bytes waiting (used) and its size (capacity); request: to the "
                       "writer, response: back")
        owners = self.sh.slots[:, S.OWNER_PID].tolist()
        names = self._pid_roles()
        for i, pid in enumerate(owners):
            if not pid:
                continue
            owner = names.get(pid, "other")
            for kind, ring in (("request", self.sh.request_rings[i]), ("response", self.sh.response_rings[i])):
                self._sample(rings, ring.used(), slot=str(i), owner=owner, ring=kind, of="used")
                self._sample(rings, ring.capacity, slot=str(i), owner=owner, ring=kind, of="capacity")
        return [rings]

    def _schedule(self, queues: dict[str, dict[int, int]]) -> list[Family]:
        """Delayed messages not yet delivered, by level; timers pending and the next one's due time
        (what the scheduler has written: ``store/scheduled.py``)."""
        p = scheduled.read(self.cfg.config_dir)
        levels = queues.get(delay.SCHEDULE_TOPIC, {})
        backlog = Family("rocketbox_delay_backlog_messages", "gauge",
                         "Delayed messages stored but not yet delivered, by delay level")
        for level in sorted(set(p.delivered) | {qid + 1 for qid in levels}):
            self._sample(backlog, max(0, levels.get(level - 1, 0) - p.delivered.get(level, 0)), level=str(level))
        timers = Family("rocketbox_timers_pending", "gauge", "Timer messages waiting for their time")
        due = Family("rocketbox_timer_next_due_timestamp_seconds", "gauge",
                     "When the next pending timer is due (0: none pending)")
        if p.timers_pending is not None:
            self._sample(timers, p.timers_pending)
            self._sample(due, p.timer_next_due_ms / 1000)
        return [backlog, timers, due]

    # ------------------------------------------------------------ HAProxy, the front door
    def _haproxy(self) -> list[Family]:
        """Its client connections now, its limit and those refused at it, from its stats socket
        (what ``appliance status`` prints); nothing when HAProxy does not answer."""
        if "haproxy" not in self.roles:
            return []
        from rocketbox.haproxy.service import admission_limit, connections, frontend_stats
        row = frontend_stats(self.cfg, timeout_s=0.5)
        if row is None:
            return []
        refused, now, maxconn = connections(row)
        current = Family("rocketbox_client_connections", "gauge",
                         "Client connections through HAProxy now, and how many it takes (its admission limit)")
        self._sample(current, now, of="open")
        self._sample(current, admission_limit(maxconn), of="limit")
        turned = Family("rocketbox_client_connections_refused_total", "counter",
                        "Client connections HAProxy closed at its admission limit since it started")
        self._sample(turned, refused)
        return [current, turned]

    # ------------------------------------------------------------ the roles' processes
    def _pid(self, role: str) -> int | None:
        try:
            with open(os.path.join(self.cfg.run_dir, f"{role}.pid")) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return None

    def _pid_roles(self) -> dict[int, str]:
        return {pid: role for role in self.roles if (pid := self._pid(role))}

    def _process(self, role: str) -> psutil.Process | None:
        pid = self._pid(role)
        if pid is None:
            return None
        proc = self.procs.get(role)
        if proc is None or proc.pid != pid:
            try:
                proc = self.procs[role] = psutil.Process(pid)
            except psutil.Error:
                return None
        return proc

    def _roles(self) -> list[Family]:
        cpu = Family("rocketbox_role_cpu_seconds_total", "counter", "CPU time of the role's process (user+system)")
        rss = Family("rocketbox_role_memory_bytes", "gauge", "Resident memory of the role's process")
        up = Family("rocketbox_role_up", "gauge", "1 while the role's process runs")
        for role in self.roles:
            proc = self._process(role)
            try:
                if proc is None or not proc.is_running():
                    raise psutil.NoSuchProcess(0)
                with proc.oneshot():
                    times, mem = proc.cpu_times(), proc.memory_info()
                    children = proc.children() if role == "haproxy" else []     # the haproxy binary
                    for c in children:
                        ct, cm = c.cpu_times(), c.memory_info()
                        times = type(times)(*(a + b for a, b in zip(times, ct)))
                        mem = type(mem)(*(a + b for a, b in zip(mem, cm)))
            except psutil.Error:
                self._sample(up, 0, role=role)
                continue
            self._sample(up, 1, role=role)
            self._sample(cpu, round(times.user + times.system, 3), role=role)
            self._sample(rss, mem.rss, role=role)
        now = Family("rocketbox_scrape_timestamp_seconds", "gauge", "When this scrape was read")
        self._sample(now, round(time.time(), 3))
        return [cpu, rss, up, now]
