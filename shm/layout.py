"""Layouts of everything the appliance shares, declared once.  Every field has exactly one writing
process; everybody else only reads.  Integers are native int64 unless noted, 8-byte aligned, and
published after the data they cover is in place.

Segment ``/<prefix>.state`` (in this order):

    control      CONTROL_LEN x int64                  CONTROL_FIELDS: see the table below
    slots        max_slots x SLOT_LEN x int64         one per producer ring pair (readers, tools)
    queue max    queue_slots x int64      (dispatcher) entries in the consume queue (max offset)
    queue min    queue_slots x int64      (dispatcher) first queue offset still stored
    queue bytes  queue_slots x int64      (dispatcher) bytes of the records put in each queue since this start
    histograms   len(HISTOGRAMS) x HIST_LEN x int64   each written by its one process (shm/histogram.py)
    queue names  queue_slots x 128 bytes  (writer)    topic of each queue slot, NUL-padded
    queue ids    queue_slots x int32      (writer)    queueId of each queue slot (both, and queue_count:
                                                      the dispatcher on a slave, the writer on a master)
    topic names  topic_slots x 128 bytes  (writer)
    topic meta   topic_slots x TOPIC_FIELDS x int32 (writer)
    offset vals  offset_slots x int64      (writer)   committed consumer offset
    offset pulls max_slots x offset_slots x int64     messages the pulls of each slot's owner found,
                                                      per consumer offset slot (shm/stats.py)
    client rows  max_slots x client_rows x CLIENT     consumer-group members; slot i's rows are
                                                      written only by slot i's owner (a reader)
    offset keys  offset_slots x 384 bytes  (writer)   "topic@group" of each consumer offset slot
    offset qids  offset_slots x int32      (writer)

(``layout()`` below is the order's one source; this table follows it.)

Segment ``/<prefix>.rings``: for each slot, a request ring (slot owner -> writer) then a response
ring (writer -> slot owner); see ``ring.py``.

Queue and topic slots are append-only: an entry is filled in, then the count in the control
block is raised, so a reader that sees count N can trust entries < N.
"""
from __future__ import annotations

from typing import Any

import numpy as np

# (field, the one process that writes it, meaning)
CONTROL_FIELDS = (
    ("magic", "supervisor", "LAYOUT_MAGIC once the segment is initialised"),
    ("stopping", "supervisor", "1 when a graceful stop has begun"),
    ("recovered", "supervisor", "1 once recovery finished and the offsets below are valid"),
    ("written", "writer", "CommitLog end offset of committed appends (the commit point; on a slave the end "
                          "of the master's bytes received, which may be inside a record)"),
    ("written_ts", "writer", "store timestamp of the last committed batch"),
    ("min_phys", "cleaner", "CommitLog min offset (first byte still stored; recovery sets it at boot)"),
    ("writer_epoch", "writer", "incremented each time a writer process starts"),
    ("journal_written", "writer", "'written' value the slots' journal_read_pos belong to"),
    ("topic_count", "writer", "topic table entries in use"),
    ("queue_count", "writer", "queue slots in use (on a slave: the dispatcher)"),
    ("topic_version", "writer", "bumped on every topic table change"),
    ("topics_data_version", "writer", "topics.json's dataVersion counter (what a registration carries)"),
    ("topics_data_version_ts", "writer", "topics.json's dataVersion timestamp"),
    ("offset_count", "writer", "consumer offset slots in use"),
    ("dispatched", "dispatcher", "CommitLog offset up to which CQ and index are built"),
    ("dispatched_ts", "dispatcher", "store timestamp of the last dispatched record"),
    ("flushed", "flusher", "CommitLog offset up to which data is on disk"),
    ("slave_acked", "replicator", "CommitLog offset the slave has confirmed (the highest of any slave)"),
    ("slave_count", "replicator", "slaves connected that have reported their offset"),
    ("slave_lag_bytes", "replicator", "bytes the slave furthest behind lacks (0: none connected)"),
    ("slave_lag_ms", "replicator", "ms since the oldest byte the slave furthest behind lacks was written"),
    ("pid_writer", "writer", "pid of the running writer (0 = none)"),
    ("pid_dispatcher", "dispatcher", "pid of the running dispatcher"),
    ("pid_flusher", "flusher", "pid of the running flusher"),
    ("pid_supervisor", "supervisor", "pid of the supervisor"),
    ("boot_ms", "supervisor", "wall-clock ms the appliance started (shm/stats.py: the counts below since then)"),
    ("boot_puts", "supervisor", "messages in the consume queues then (sum of queue max offsets)"),
    ("stats_day", "supervisor", "local date (ordinal) the morning marks below were taken on"),
    ("put_yesterday_morning", "supervisor", "messages put since boot, at the start of yesterday"),
    ("put_today_morning", "supervisor", "messages put since boot, at the start of today"),
    ("get_yesterday_morning", "supervisor", "messages pulled since boot, at the start of yesterday"),
    ("get_today_morning", "supervisor", "messages pulled since boot, at the start of today"),
    ("boot_written", "supervisor", "CommitLog end at recovery: records below it were written before this start"),
    ("disk_cl_ppm", "cleaner", "how full the CommitLog's partition is, parts per million (-1: unknown)"),
    ("disk_cq_ppm", "cleaner", "how full the consume queues' partition is, ppm"),
    ("disk_index_ppm", "cleaner", "how full the index's partition is, ppm"),
    ("disk_full", "cleaner", "1 while a partition is fuller than diskSpaceWarningLevelRatio: sends are refused"),
    ("dispatch_no_room", "dispatcher", "1 while a consume-queue or index file cannot be made: sends are refused"),
    ("registered_ms", "reader-0", "wall-clock ms a name server last took the whole topic table (0: none yet)"),
    ("dispatch_unindexed", "dispatcher", "records dispatched to their queue without index keys since boot "
                                         "(their pass failed, and so did they alone: logged with their offset)"),
    ("dispatch_unqueued", "dispatcher", "records no consume queue could take since boot (logged with their offset)"),
    ("retention_unconsumed", "cleaner", "messages deleted by retention before a subscribed group consumed them, "
                                        "since boot"),
    ("cut_to", "writer", "a slave: the offset its CommitLog was last cut back to (its master lost its tail)"),
    ("cut_seq", "writer", "a slave: bumped at each cut, once 'written' is lowered; the bytes go once the "
                          "dispatcher and the flusher have taken it"),
    ("cut_dispatched", "dispatcher", "the cut_seq whose cut the consume queues, the index and 'dispatched' took"),
    ("cut_flushed", "flusher", "the cut_seq whose cut 'flushed' and the checkpoint took"),
    ("retention_files", "cleaner", "CommitLog files retention deleted since boot"),
    ("retention_forced", "cleaner", "of them, those deleted because the disk was full (not for their age)"),
    ("ha_sent", "replicator", "a master: the furthest CommitLog offset it has sent a slave since this start (a "
                              "slave at or below it, or below boot_written, shares this start's history)"),
)
# the field names as attributes (C.WRITTEN: its word); generated from the table, so Any to mypy
C: Any = type("C", (), {name.upper(): i for i, (name, _w, _m) in enumerate(CONTROL_FIELDS)})
CONTROL_LEN = 64      # int64 words reserved; room to grow without moving what follows
assert len(CONTROL_FIELDS) <= CONTROL_LEN
LAYOUT_MAGIC = 0x52424F580C       # "RBOX" v12 (v3: group names of 255 bytes, client ids of 248; v4: epoch_read_pos;
                                  # v5: offset pulls; v6: slots of 16 words, pulls found and missed; v7: boot_written,
                                  # disk ratios; v8: registered_ms; v9: dispatch_unindexed, dispatch_unqueued,
                                  # retention_unconsumed; v10: slave_count, slave_lag_*, replica_wait;
                                  # v11: cut_*, ha_sent; v12: queue bytes, histograms, pulled_bytes,
                                  # pull_ms_max, tx_commits, tx_rollbacks, retention_files, retention_forced,
                                  # a slab's pushed_ns)

SLOT_FIELDS = (
    ("owner_pid", "slot owner", "pid holding the slot (flock'ed), 0 = free"),
    ("claim_epoch", "slot owner", "bumped per claim; request ids carry it, stale replies are dropped"),
    ("flush_wait", "slot owner", "CommitLog offset this owner waits to see flushed, 0 = none"),
    ("dispatch_wait", "slot owner", "1 = post my waker when new messages are dispatched; 2 = only when "
                                    "delayed messages or timers are (the scheduler)"),
    ("journal_read_pos", "writer", "request-ring read position once journal_written is committed"),
    ("members_version", "slot owner", "bumped whenever the owner's client rows change"),
    ("epoch_read_pos", "writer", "request-ring read position when the current writer started: an entry "
                                 "before it that has no reply was taken by an earlier writer, and is lost"),
    ("pulled_msgs", "slot owner", "messages its pulls transferred, kept across owners (shm/stats.py)"),
    ("pulls_found", "slot owner", "its pulls (each try of a held one) that found messages, kept across owners"),
    ("pulls_missed", "slot owner", "its pulls (each try of a held one) that found none, kept across owners"),
    ("replica_wait", "slot owner", "CommitLog offset this owner waits for a slave to have (SYNC_MASTER), 0 = none"),
    ("pulled_bytes", "slot owner", "bytes its pulls transferred, kept across owners"),
    ("pull_ms_max", "slot owner", "the longest a pull of its took to answer, ms (getMessageEntireTimeMax)"),
    ("tx_commits", "slot owner", "transactions its END_TRANSACTIONs committed, kept across owners"),
    ("tx_rollbacks", "slot owner", "transactions its END_TRANSACTIONs rolled back, kept across owners"),
)
S: Any = type("S", (), {name.upper(): i for i, (name, _w, _m) in enumerate(SLOT_FIELDS)})
SLOT_LEN = 16
assert len(SLOT_FIELDS) <= SLOT_LEN

NAME_BYTES = 128      # topic names are at most 127 bytes
TOPIC_FIELDS = ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order", "live")
T: Any = type("T", (), {name.upper(): i for i, name in enumerate(TOPIC_FIELDS)})
TOPIC_LEN = 8
OFFSET_KEY_BYTES = 384   # "topic@group": topic <= 127 bytes, group <= 255 bytes (RocketMQ's limits)
CLIENT = np.dtype([("group", "S256"), ("client_id", "S248"), ("heartbeat_ms", "<i8")])   # heartbeat_ms 0 = free


_LATENCY_US = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
               2_000_000, 3_000_000, 4_000_000, 5_000_000, 10_000_000)   # (RocketMQ's putMessageDistributeTime
                                                                         # bounds among them: 1, 10, 50 ... 10,000 ms)
# (name, the one process that writes it, unit of its values, upper bounds of its buckets, what it counts)
HISTOGRAMS = (
    ("put_latency", "writer", "us", _LATENCY_US,
     "a commit pass, from its rings read to its commit point published; once for each record it was asked to append"),
    ("ring_wait", "writer", "us", _LATENCY_US,
     "a PUT slab's wait in its request ring, from its push to the start of the pass that took it; once per record"),
    ("commit_records", "writer", "records", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_024, 2_048, 4_096),
     "records a commit pass was asked to append (the group commit's size)"),
    ("flush_latency", "flusher", "us", _LATENCY_US, "a CommitLog flush: its files' fdatasyncs"),
    ("message_size", "dispatcher", "bytes", (1_024, 4_096, 16_384, 65_536, 262_144, 524_288, 1_048_576,
                                             2_097_152, 4_194_304),
     "stored size of each record put in a consume queue"),
)
H: Any = type("H", (), {name.upper(): i for i, (name, *_rest) in enumerate(HISTOGRAMS)})
HIST_LEN = 24         # int64 words each: count, sum, max, then a count per bucket (the last one +Inf)
HIST_HEAD = 3
assert all(HIST_HEAD + len(bounds) + 1 <= HIST_LEN for _n, _w, _u, bounds, _m in HISTOGRAMS)


def state_size(max_slots: int, queue_slots: int, topic_slots: int, offset_slots: int, client_rows: int) -> int:
    return (CONTROL_LEN * 8 + max_slots * SLOT_LEN * 8 + queue_slots * (NAME_BYTES + 4 + 8 + 8 + 8)
            + len(HISTOGRAMS) * HIST_LEN * 8
            + topic_slots * (NAME_BYTES + TOPIC_LEN * 4) + offset_slots * (OFFSET_KEY_BYTES + 4 + 8 + max_slots * 8)
            + max_slots * client_rows * CLIENT.itemsize)


def state_views(buf: np.ndarray, max_slots: int, queue_slots: int, topic_slots: int, offset_slots: int,
                client_rows: int) -> dict:
    """Carve the state segment into named numpy views (no copies)."""
    views, at = {}, 0

    def take(name, count, dtype, shape=None):
        nonlocal at
        n = count * np.dtype(dtype).itemsize
        v = buf[at:at + n].view(dtype)
        views[name] = v.reshape(shape) if shape else v
        at += n

    take("control", CONTROL_LEN, "<i8")
    take("slots", max_slots * SLOT_LEN, "<i8", (max_slots, SLOT_LEN))
    take("queue_max", queue_slots, "<i8")
    take("queue_min", queue_slots, "<i8")
    take("queue_bytes", queue_slots, "<i8")
    take("histograms", len(HISTOGRAMS) * HIST_LEN, "<i8", (len(HISTOGRAMS), HIST_LEN))
    take("queue_names", queue_slots, f"S{NAME_BYTES}")
    take("queue_ids", queue_slots, "<i4")
    take("topic_names", topic_slots, f"S{NAME_BYTES}")
    take("topic_meta", topic_slots * TOPIC_LEN, "<i4", (topic_slots, TOPIC_LEN))
    take("offset_values", offset_slots, "<i8")
    take("offset_pulls", max_slots * offset_slots, "<i8", (max_slots, offset_slots))
    take("clients", max_slots * client_rows, CLIENT, (max_slots, client_rows))
    take("offset_keys", offset_slots, f"S{OFFSET_KEY_BYTES}")
    take("offset_qids", offset_slots, "<i4")
    assert at <= len(buf)
    return views
