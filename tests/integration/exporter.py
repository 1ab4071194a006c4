"""What the real ``rocketmq-exporter`` (apache/rocketmq-exporter, ``model/BrokerRuntimeStats.java``)
parses strictly in GET_BROKER_RUNTIME_INFO's table: a key it reads that is missing, or a value in
another form, throws and loses the broker's figures.  ``parse`` reads a table as it does; ``shape``
names a value's form, to compare ours with the real 4.9.8 broker's key by key."""
from __future__ import annotations

import re

LONGS = ("msgPutTotalTodayNow", "msgGetTotalTodayNow", "msgPutTotalTodayMorning", "msgGetTotalTodayMorning",
         "msgPutTotalYesterdayMorning", "msgGetTotalYesterdayMorning", "sendThreadPoolQueueHeadWaitTimeMills",
         "queryThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills", "queryThreadPoolQueueSize",
         "pullThreadPoolQueueSize", "sendThreadPoolQueueSize", "sendThreadPoolQueueCapacity",
         "pullThreadPoolQueueCapacity", "queryThreadPoolQueueCapacity", "bootTimestamp", "commitLogMinOffset",
         "commitLogMaxOffset", "dispatchMaxBuffer", "pageCacheLockTimeMills", "getMessageEntireTimeMax",
         "putMessageTimesTotal", "startAcceptSendRequestTimeStamp", "putMessageEntireTimeMax",
         "earliestMessageTimeStamp", "remainTransientStoreBufferNumbs", "putMessageSizeTotal", "dispatchBehindBytes")
INTS = ("brokerVersion",)
DOUBLES = ("consumeQueueDiskRatio", "commitLogDiskRatio", "putMessageAverageSize")
TPS = ("putTps", "getMissTps", "getTransferedTps", "getTotalTps", "getFoundTps")
OPTIONAL_DOUBLES = ("putLatency99", "putLatency999")
OTHERS = ("putMessageDistributeTime", "commitLogDirCapacity", "remainHowManyDataToFlush", "runtime", "brokerVersionDesc")
STRICT = LONGS + INTS + DOUBLES + TPS + OTHERS
_UNITS = "KMGTPE"


def _bytes(text: str) -> float:
    """Utils.machineReadableByteCount's reading of "<n> <unit>"."""
    n, unit = text.split(" ")
    return float(n) * 1024 ** (_UNITS.index(unit[0]) + 1 if unit[0] in _UNITS else 0)


def parse(table: dict[str, str]) -> dict:
    """The table as BrokerRuntimeStats reads it (KeyError, ValueError or IndexError where it throws)."""
    out: dict = {k: int(table[k]) for k in LONGS + INTS}
    out.update({k: float(table[k]) for k in DOUBLES})
    out.update({k: float(table.get(k, "-1")) for k in OPTIONAL_DOUBLES})
    for k in TPS:
        kept = re.sub(" +$", "", table[k])                  # (Java's split drops the trailing empties:
        parts = kept.split(" ") if kept else []             # all of them, the real broker's first 10 s)
        assert "" not in parts[:3], f"{k}: {table[k]!r}"     # (it parses the first three)
        out[k] = [float(x) for x in parts[:3]]
    out["putMessageDistributeTime"] = {part.split(":")[0].strip("[]"): int(part.split(":")[1])
                                       for part in table["putMessageDistributeTime"].split(" ") if part}
    arr = table["commitLogDirCapacity"].split(" ")
    out["commitLogDirCapacity"] = (_bytes(f"{arr[2]} {arr[3][:-1]}"), _bytes(f"{arr[6]} {arr[7][:-1]}"))
    flush = table["remainHowManyDataToFlush"].split(" ")
    out["remainHowManyDataToFlush"] = float(flush[0]) * 1024 ** (_UNITS.find(flush[1][0]) + 1)
    for k in table:
        if k.startswith("scheduleMessageOffset"):
            out[k] = [int(x) for x in table[k].split(",")]
    return out


def shape(value: str) -> str:
    """A value's form: its digits and letters generalised ("0.22" and "0.5" alike, "Total : 9.1 GiB..." by its words)."""
    return re.sub(r"-?\d+(\.\d+)?(E-?\d+)?", "#", value).strip()
