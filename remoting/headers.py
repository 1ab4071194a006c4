"""Custom-header schemas: each request's extFields declared once, decoded by one generic function
(FACTS §1.6, §3).

Java flattens a header object into extFields as strings; clients differ in dialect, so decoding
accepts "true"/"TRUE"/"1" as true (the C++ client sends ``batch=1``), decimal integers as ints,
and SEND_MESSAGE_V2/SEND_BATCH_MESSAGE's one-letter names as the long ones.  A missing required
field or a value that is not of its type raises ``HeaderError`` with Java's wording; the handler
answers SYSTEM_ERROR with it as the remark, as a Java broker does.  Unknown keys are ignored.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from rocketbox.native import compiled
from rocketbox.remoting.codes import RequestCode as R

S, I, L, B = "S", "I", "L", "B"           # string, int32, int64, boolean  # noqa: E741 (the wire's letters)
_RANGES = {I: (-2**31, 2**31 - 1), L: (-2**63, 2**63 - 1)}
_DECIMAL = re.compile(r"[+-]?\d+")


class HeaderError(Exception):
    """A well-formed request whose header fields are missing, of the wrong type, or more than
    the broker holds (a topic@group key past the offset table's width)."""


class Field(NamedTuple):
    name: str
    kind: str
    required: bool = False


def _f(spec: str) -> tuple[Field, ...]:
    """``"topic:S! queueId:I! subscription:S"`` -> fields; ``!`` marks required (@CFNotNull)."""
    out = []
    for item in spec.split():
        name, kind = item.split(":")
        out.append(Field(name, kind.rstrip("!"), kind.endswith("!")))
    return tuple(out)


SEND = _f("producerGroup:S! topic:S! defaultTopic:S! defaultTopicQueueNums:I! queueId:I! sysFlag:I! "
          "bornTimestamp:L! flag:I! properties:S reconsumeTimes:I unitMode:B maxReconsumeTimes:I batch:B bname:S")

SCHEMAS: dict[int, tuple[Field, ...]] = {
    R.SEND_MESSAGE: SEND,
    R.SEND_MESSAGE_V2: SEND,
    R.SEND_BATCH_MESSAGE: SEND,
    R.SEND_REPLY_MESSAGE: SEND,
    R.SEND_REPLY_MESSAGE_V2: SEND,
    R.PULL_MESSAGE: _f("consumerGroup:S! topic:S! queueId:I! queueOffset:L! maxMsgNums:I! sysFlag:I! "
                       "commitOffset:L! suspendTimeoutMillis:L! subscription:S subVersion:L! expressionType:S"),
    R.QUERY_CONSUMER_OFFSET: _f("consumerGroup:S! topic:S! queueId:I!"),
    R.UPDATE_CONSUMER_OFFSET: _f("consumerGroup:S! topic:S! queueId:I! commitOffset:L!"),
    R.GET_MAX_OFFSET: _f("topic:S! queueId:I!"),
    R.GET_MIN_OFFSET: _f("topic:S! queueId:I!"),
    R.GET_EARLIEST_MSG_STORETIME: _f("topic:S! queueId:I!"),
    R.SEARCH_OFFSET_BY_TIMESTAMP: _f("topic:S! queueId:I! timestamp:L!"),
    R.VIEW_MESSAGE_BY_ID: _f("offset:L!"),
    R.CANCEL_TIMER: _f("msgId:S!"),
    R.QUERY_MESSAGE: _f("topic:S! key:S! maxNum:I! beginTimestamp:L! endTimestamp:L!"),
    R.GET_CONSUMER_LIST_BY_GROUP: _f("consumerGroup:S!"),
    R.GET_TOPIC_STATS_INFO: _f("topic:S!"),
    R.GET_CONSUME_STATS: _f("consumerGroup:S! topic:S"),
    R.VIEW_BROKER_STATS_DATA: _f("statsName:S! statsKey:S!"),
    R.GET_CONSUMER_CONNECTION_LIST: _f("consumerGroup:S!"),
    R.GET_PRODUCER_CONNECTION_LIST: _f("producerGroup:S!"),
    R.QUERY_TOPIC_CONSUME_BY_WHO: _f("topic:S!"),
    R.GET_CONSUMER_RUNNING_INFO: _f("consumerGroup:S! clientId:S! jstackEnable:B"),
    R.CONSUME_MESSAGE_DIRECTLY: _f("consumerGroup:S! clientId:S msgId:S brokerName:S"),
    R.INVOKE_BROKER_TO_RESET_OFFSET: _f("topic:S! group:S! timestamp:L! isForce:B!"),
    R.RESET_CONSUMER_CLIENT_OFFSET: _f("topic:S! group:S! timestamp:L! isForce:B!"),
    R.UNREGISTER_CLIENT: _f("clientID:S! producerGroup:S consumerGroup:S"),
    R.NOTIFY_CONSUMER_IDS_CHANGED: _f("consumerGroup:S!"),
    R.UPDATE_AND_CREATE_TOPIC: _f("topic:S! defaultTopic:S! readQueueNums:I! writeQueueNums:I! perm:I! "
                                  "topicFilterType:S! topicSysFlag:I order:B! retentionMs:L purgedBeforeMs:L purgeQueueId:I"),
    R.END_TRANSACTION: _f("producerGroup:S! tranStateTableOffset:L! commitLogOffset:L! commitOrRollback:I! "
                          "fromTransactionCheck:B msgId:S! transactionId:S"),
    R.CONSUMER_SEND_MSG_BACK: _f("offset:L! group:S! delayLevel:I! originMsgId:S originTopic:S unitMode:B "
                                 "maxReconsumeTimes:I"),
    R.GET_ROUTEINFO_BY_TOPIC: _f("topic:S! acceptStandardJsonOnly:B"),
    R.REGISTER_BROKER: _f("brokerName:S! brokerAddr:S! clusterName:S! haServerAddr:S! brokerId:L! "
                          "compressed:B bodyCrc32:I"),
    R.UNREGISTER_BROKER: _f("brokerName:S! brokerAddr:S! clusterName:S! brokerId:L!"),
    R.PUT_KV_CONFIG: _f("namespace:S! key:S! value:S!"),
    R.GET_KV_CONFIG: _f("namespace:S! key:S!"),
    R.DELETE_KV_CONFIG: _f("namespace:S! key:S!"),
    R.DELETE_TOPIC_IN_NAMESRV: _f("topic:S!"),
    R.GET_KVLIST_BY_NAMESPACE: _f("namespace:S!"),
}


def _value(field: Field, raw: str):
    if field.kind == S:
        return raw
    if field.kind == B:
        return raw.strip().lower() in ("true", "1")
    if not _DECIMAL.fullmatch(raw.strip()):
        raise HeaderError(f"the custom field <{field.name}> value '{raw[:64]}' is not a number")
    n = int(raw)
    lo, hi = _RANGES[field.kind]
    if not lo <= n <= hi:
        raise HeaderError(f"the custom field <{field.name}> value {n} is out of range")
    return n


_SHORT_NAMES = {f.name: short for short, f in zip("abcdefghijklmn", SEND)}
_V2_CODES = (R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE, R.SEND_REPLY_MESSAGE_V2)
_MAX_DIGITS = {I: 9, L: 18}         # a decimal this long is always in range: int() it directly
_SMALL = {str(n): n for n in range(1024)}          # the usual ints: queue ids, flags, counts
_SMALL_ASCII = {k.encode(): n for k, n in _SMALL.items()}


def _compile(code: int, names: tuple[str, ...] | None = None):
    """One straight-line decoder for request ``code``'s schema (a loop over the fields, with its
    lookups and calls, costs more than the work on a send's 14 fields), by ``_value``'s rules,
    which the generated code calls for anything but the common case.

    ``names`` None: the decoder takes extFields as a dict of strings.  Else it takes the raw ASCII
    values of a header whose extFields came in the order ``names`` (``Command.fields``; a name
    sent twice: its last value), so which value is which field is settled here, once per layout;
    the codec learns a layout only when no value is empty."""
    layout = names is not None
    lit = (lambda text: repr(text.encode())) if layout else repr       # a literal of the values' type
    env = {"HeaderError": HeaderError, "_value": _value, "_small": (_SMALL_ASCII if layout else _SMALL).get}
    if names is not None:
        at = {n: i for i, n in enumerate(names)}
        lines = ["def decode(v):", f"    {''.join(f'v{i}, ' for i in range(len(names)))}= v"]
    else:
        lines = ["def decode(ext):", "    g = ext.get"]
    fields = SCHEMAS[code]
    for j, f in enumerate(fields):
        env[f"F{j}"] = f
        short = _SHORT_NAMES[f.name] if code in _V2_CODES else None
        null = (f"raise HeaderError('the custom field <{f.name}> is null')" if f.required else f"o{j} = None")
        if layout:
            i = at.get(short) if short else None
            i = at.get(f.name) if i is None else i
            if i is None:
                lines.append(f"    {null}")
                continue
            x, text, digits = f"v{i}", f"v{i}.decode()", "isdigit"
        else:
            x, text, digits = f"r{j}", f"r{j}", "isdecimal"
            lines.append(f"    {x} = g({short or f.name!r})")
            if short:
                lines.append(f"    if {x} is None: {x} = g({f.name!r})")
            missing = f"{x} is None" if f.kind == S else f'{x} is None or {x} == ""'     # Java: empty is null
            lines += [f"    if {missing}: {null}", "    else:"]
        pad = "    " if layout else "        "
        if f.kind == S:
            lines.append(f"{pad}o{j} = {text}")
        elif f.kind == B:
            lines.append(f"{pad}o{j} = {x}.strip().lower() in ({lit('true')}, {lit('1')})")
        else:
            lines += [f"{pad}o{j} = _small({x})", f"{pad}if o{j} is None:",
                      f"{pad}    o{j} = int({x}) if {x}.{digits}() and len({x}) <= {_MAX_DIGITS[f.kind]} "
                      f"else _value(F{j}, {text})"]
    lines.append("    return {" + ", ".join(f"{f.name!r}: o{j}" for j, f in enumerate(fields)) + "}")
    exec("\n".join(lines), env)          # noqa: S102 - generated from the schema table above only
    return env["decode"]


_DECODERS = {code: _compile(code) for code in SCHEMAS}
_LAYOUT_DECODERS: dict[tuple[int, tuple[str, ...]], Callable[[tuple], dict]] = {}
_KINDS = {S: 0, I: 1, L: 2, B: 3}
# each schema as native.typed_header takes it: (name, short name or None, kind, required) a field
_SPECS = {code: tuple((f.name, _SHORT_NAMES[f.name] if code in _V2_CODES else None, _KINDS[f.kind], f.required)
                      for f in fields) for code, fields in SCHEMAS.items()}
_typed: Callable[[dict, tuple], dict | None] | None = compiled.typed_header if compiled is not None else None


def decode(cmd) -> dict:
    """Typed fields of request ``cmd``'s header (absent optional fields are None).  V2 codes
    take the one-letter names and, failing that, the long ones."""
    fields = cmd.fields
    if fields is None:          # extFields typed in C when every value is plain, else by the generated decoder
        code, ext = cmd.code, cmd.ext
        spec = _SPECS.get(code) if _typed is not None else None
        typed = _typed(ext, spec) if _typed is not None and spec is not None else None
        return typed if typed is not None else _DECODERS[code](ext)
    key = (cmd.code, fields[0])
    dec = _LAYOUT_DECODERS.get(key)
    if dec is None:
        if len(_LAYOUT_DECODERS) >= 1024:
            _LAYOUT_DECODERS.clear()
        dec = _LAYOUT_DECODERS[key] = _compile(*key)
    return dec(fields[1])


def encode(values: dict) -> dict[str, str]:
    """A response header as extFields: every non-None value as Java's toString()."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in values.items() if v is not None}
