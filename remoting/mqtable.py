"""JSON bodies holding a map keyed by MessageQueue (FACTS §3.9): TopicStatsTable and ConsumeStats.

fastjson writes such a map with each key the MessageQueue object literal itself, fields in
alphabetical order, ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}``, and
reads only that form back: a Java admin tool given a quoted key cannot turn it into a
MessageQueue.  Neither direction is JSON, so both are here: ``encode`` writes the form, and
``decode`` reads it (a key becomes a ``(topic, brokerName, queueId)`` tuple).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# one object-literal key; brokerName and topic as JSON string contents (escapes kept)
_MQ_KEY = re.compile(r'\{\s*"brokerName"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"queueId"\s*:\s*(-?\d+)\s*,'
                     r'\s*"topic"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}\s*:')
_SEP, _SEP_JSON = "\x01", "\\u0001"      # joins a key's fields in the quoted key decode makes of it


def encode(fields: dict[str, Any], table_field: str, table: Mapping[tuple[str, str, int], Any]) -> bytes:
    """``fields`` and, under ``table_field``, ``table`` {(topic, brokerName, queueId): value}, keys
    in fastjson's order (so ``table_field`` sorts among ``fields`` as Java would place it)."""
    rows = ",".join(f'{{"brokerName":{json.dumps(b)},"queueId":{q},"topic":{json.dumps(t)}}}:'
                    f'{json.dumps(v, sort_keys=True, separators=(",", ":"))}'
                    for (t, b, q), v in sorted(table.items()))
    parts = [f'{json.dumps(k)}:{json.dumps(v, sort_keys=True, separators=(",", ":"))}' for k, v in fields.items()]
    parts.append(f'{json.dumps(table_field)}:{{{rows}}}')
    return ("{" + ",".join(sorted(parts)) + "}").encode()


def decode(body: bytes, table_field: str) -> tuple[dict[str, Any], dict[tuple[str, str, int], Any]]:
    """-> (the other fields, the table by (topic, brokerName, queueId)); ValueError for a body
    that is not this form."""
    text = _MQ_KEY.sub(lambda m: f'"{m[1]}{_SEP_JSON}{m[2]}{_SEP_JSON}{m[3]}":', body.decode("utf-8"))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a {table_field} body: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get(table_field, {}), dict):
        raise ValueError(f"not a {table_field} body: {text[:120]}")
    table: dict[tuple[str, str, int], Any] = {}
    for key, value in (data.pop(table_field, None) or {}).items():
        broker, qid, topic = key.split(_SEP)
        table[(topic, broker, int(qid))] = value
    return data, table
