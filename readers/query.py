"""QUERY_MESSAGE (12): the messages of a topic stored under a key, or under a unique key (a client
msgId), within a time range (FACTS-wave2 §5, broker:processor/QueryMessageProcessor.java).

As 4.9.8: the IndexFiles are read newest first (``store/indexfile.offsets_of``), ``maxNum`` is at
most 64 (``maxMsgsNumBatch``) and 32 for a unique-key query (``_UNIQUE_KEY_QUERY``), the answer
carries the newest IndexFile's end (``indexLastUpdateTimestamp``, ``indexLastUpdatePhyoffset``)
and the records back to back, or 22 ``can not find message, maybe time range not correct``.

Beyond 4.9.8, whose index compares a 4-byte hash and hands the client other keys' messages to
drop: only exact matches are answered: the topic, and the key among the record's ``KEYS``
(space-separated) or, for a unique-key query, its ``UNIQ_KEY``. They are the newest ``maxNum``
matches, newest first. The work is bounded: at most ``MAX_EXAMINED`` index entries are looked at
per query, whatever the chains hold.
"""
from __future__ import annotations

import itertools

from rocketbox.remoting import headers
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store import indexfile, message

MAX_NUM = 64              # maxMsgsNumBatch: the most records one query answers
UNIQUE_MAX_NUM = 32       # defaultQueryMaxNum: a unique-key query's
MAX_EXAMINED = 4096       # index entries (hash matches) read per query at most
NOT_FOUND = "can not find message, maybe time range not correct"
_KEY_SEP = b" "           # MessageConst.KEY_SEPARATOR


def matches(props: bytes, key: bytes, unique: bool) -> bool:
    """The record's properties name ``key``: as its UNIQ_KEY (a unique-key query), else as one
    of its KEYS."""
    if unique:
        return message.property_value(props, b"UNIQ_KEY") == key
    keys = message.property_value(props, b"KEYS")
    return keys is not None and key in keys.split(_KEY_SEP)


class QueryProcessor:
    def __init__(self, broker):
        self.cfg, self.view, self.ctl = broker.cfg, broker.view, broker.sh.control

    def handlers(self) -> dict:
        return {R.QUERY_MESSAGE: self.query}

    def query(self, cmd, _conn):
        h = headers.decode(cmd)
        unique = (cmd.ext or {}).get("_UNIQUE_KEY_QUERY") == "true"
        limit = UNIQUE_MAX_NUM if unique else min(MAX_NUM, h["maxNum"])
        cfg = self.cfg
        ts, phys = indexfile.last_update(cfg.index_dir, cfg.maxHashSlotNum, cfg.maxIndexNum)
        ext = {"indexLastUpdateTimestamp": str(ts), "indexLastUpdatePhyoffset": str(phys)}
        found = self.find(h["topic"], h["key"], h["beginTimestamp"], h["endTimestamp"], limit, unique)
        if not found:
            return cmd.response(RC.QUERY_NOT_FOUND, NOT_FOUND, ext=ext)
        return cmd.response(ext=ext, body=b"".join(found))

    def find(self, topic: str, key: str, begin_ts: int, end_ts: int, limit: int, unique: bool) -> list[bytes]:
        """The newest ``limit`` records of ``topic`` stored within [begin_ts, end_ts] whose key is
        ``key`` (``matches``), newest first."""
        cfg = self.cfg
        if limit <= 0 or begin_ts > end_ts or not cfg.messageIndexEnable:
            return []
        out: list[bytes] = []
        seen: set[int] = set()
        want_topic, want_key = topic.encode(), key.encode()
        for phys in itertools.islice(indexfile.offsets_of(cfg.index_dir, f"{topic}#{key}", cfg.maxHashSlotNum,
                                                          cfg.maxIndexNum, begin_ts, end_ts), MAX_EXAMINED):
            if phys in seen:                        # (a key named twice in one message's KEYS)
                continue
            seen.add(phys)
            rec = self.view.stored(phys)
            if rec is not None and rec.topic == want_topic and matches(rec.props, want_key, unique):
                out.append(rec.raw)
                if len(out) >= limit:
                    break
        return out
