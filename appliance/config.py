"""broker.conf: one table of (key, type, default, check) read into one frozen ``BrokerConfig``.

The file is Java-properties (``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments)
with RocketMQ's own key names, so an operator's broker.conf mostly works as is.  An unknown key or
a bad value stops start-up with the file, line, key and value (``ConfigError``).  rocketbox's own
keys are few and follow the same camelCase style (see README).  Nothing else reads broker.conf.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ConfigError(Exception):
    pass


def _local_ip() -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
        return ip if not ip.startswith("127.") else "127.0.0.1"
    except OSError:
        return "127.0.0.1"


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("expected true or false")
    return low == "true"


def _choice(*names):
    def parse(v: str) -> str:
        if v not in names:
            raise ValueError("expected one of " + ", ".join(names))
        return v
    return parse


def _int_in(lo: int, hi: int):
    def parse(v: str) -> int:
        try:
            n = int(v.strip())
        except ValueError:
            raise ValueError(f"expected a whole number in [{lo}, {hi}]") from None
        if not lo <= n <= hi:
            raise ValueError(f"expected a whole number in [{lo}, {hi}]")
        return n
    return parse


def parse_delay_levels(v: str) -> tuple[int, ...]:
    out = []
    for tok in v.split():
        if len(tok) < 2 or tok[-1] not in _UNITS or not tok[:-1].isdigit():
            raise ValueError(f"delay level '{tok}' is not <number><s|m|h|d>")
        out.append(int(tok[:-1]) * _UNITS[tok[-1]])
    if not out:
        raise ValueError("no delay levels")
    return tuple(out)


def _str(v: str) -> str:
    return v.strip()


_MAX = 2**62
# key, parser, default (a string as it would appear in the file, or a callable), meaning
TABLE = (
    ("brokerClusterName", _str, "DefaultCluster", "cluster this broker registers in"),
    ("brokerName", _str, lambda: socket.gethostname(), "broker name (default: host name)"),
    ("brokerId", _int_in(0, 1024), "0", "0 = master, > 0 = slave"),
    ("brokerIP1", _str, lambda: _local_ip(), "address stored in records and registered with name servers"),
    ("listenPort", _int_in(3, 65534), "10911", "client-facing port (HAProxy); VIP = listenPort-2, HA = listenPort+1"),
    ("namesrvAddr", _str, "127.0.0.1:9876", "name servers, host:port;host:port (empty: register nowhere)"),
    ("kvConfigPath", _str, "", "the name server's KV config file (default <storePathRootDir>/namesrv/kvConfig.json)"),
    ("storePathRootDir", _str, "data/store", "store root (relative paths are relative to the working directory)"),
    ("storePathCommitLog", _str, "", "CommitLog directory (default <storePathRootDir>/commitlog)"),
    ("brokerRole", _choice("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"), "ASYNC_MASTER",
     "a master (brokerId 0) takes sends and serves slaves on listenPort + 1; SYNC_MASTER answers a send once "
     "a slave has it; a SLAVE (brokerId > 0) copies its master and serves reads"),
    ("haMasterAddress", _str, "", "a slave's master HA address, host:port (empty: the one the name servers give)"),
    ("slaveReadEnable", _bool, "false", "a master tells consumers far behind to read from the slave"),
    ("slaveTimeout", _int_in(1, 600_000), "3000", "SYNC_MASTER: a send's wait for a slave before FLUSH_SLAVE_TIMEOUT, ms"),
    ("haSlaveFallbehindMax", _int_in(0, 2**62), "268435456",
     "SYNC_MASTER: a slave further behind than this many bytes is not in sync (SLAVE_NOT_AVAILABLE)"),
    ("haTransferBatchSize", _int_in(1024, 2**26), "32768", "most CommitLog bytes a master sends a slave in one chunk"),
    ("haSendHeartbeatInterval", _int_in(100, 600_000), "5000", "ms: an idle master's heartbeat to its slaves, an idle slave's report"),
    ("haHousekeepingInterval", _int_in(500, 3_600_000), "20000", "ms: a replication peer silent this long is dropped"),
    ("flushDiskType", _choice("ASYNC_FLUSH", "SYNC_FLUSH"), "ASYNC_FLUSH", ""),
    ("mappedFileSizeCommitLog", _int_in(64 * 1024, 2**40), "1073741824", "CommitLog file size"),
    ("mappedFileSizeConsumeQueue", _int_in(20, 2**31), "6000000", "ConsumeQueue file size (rounded up to 20)"),
    ("maxMessageSize", _int_in(1024, 2**30), "4194304", "largest message body"),
    ("defaultTopicQueueNums", _int_in(1, 1024), "8", "queues of TBW102 (auto-created topics)"),
    ("autoCreateTopicEnable", _bool, "true", ""),
    ("autoCreateSubscriptionGroup", _bool, "true", ""),
    ("clusterTopicEnable", _bool, "true", ""),
    ("brokerTopicEnable", _bool, "true", ""),
    ("flushIntervalCommitLog", _int_in(1, 60_000), "500", "ASYNC_FLUSH period, ms"),
    ("flushCommitLogLeastPages", _int_in(0, 2**20), "4", "ASYNC_FLUSH: flush only when this many 4 KiB pages are dirty"),
    ("flushCommitLogThoroughInterval", _int_in(0, 3_600_000), "10000", "ASYNC_FLUSH: flush everything at least this often, ms"),
    ("flushIntervalConsumeQueue", _int_in(1, 60_000), "1000", "ConsumeQueue/index flush period, ms"),
    ("syncFlushTimeout", _int_in(1, 600_000), "5000", "SYNC_FLUSH wait before FLUSH_DISK_TIMEOUT, ms"),
    ("osPageCacheBusyTimeOutMills", _int_in(1, 600_000), "1000", "writer stalled this long: sends refused, SYSTEM_BUSY, ms"),
    ("waitTimeMillsInSendQueue", _int_in(1, 600_000), "200", "a send held this long behind a stalled writer: SYSTEM_BUSY, ms"),
    ("deleteWhen", _str, "04", "hours of day retention runs, ';'-separated"),
    ("fileReservedTime", _int_in(0, 100_000), "72", "hours a CommitLog file is kept"),
    ("diskMaxUsedSpaceRatio", _int_in(10, 95), "75", "percent"),
    ("diskSpaceCleanForciblyRatio", _int_in(10, 100), "85", "percent: a fuller disk deletes the oldest CommitLog files "
                                                              "whatever their age (RocketMQ's system property, 0.85)"),
    ("cleanFileForciblyEnable", _bool, "true", "above diskSpaceCleanForciblyRatio, delete files before they expire"),
    ("cleanResourceInterval", _int_in(100, 3_600_000), "10000", "retention pass period, ms"),
    ("scrubBytesPerSecond", _int_in(0, 2**40), "33554432", "the background scrub's read rate (0: no scrub)"),
    ("scrubIntervalHours", _int_in(0, 100_000), "24", "a scrub pass every N hours (0: one after the other)"),
    ("diskSpaceWarningLevelRatio", _int_in(10, 100), "90", "percent: a fuller disk refuses sends (RocketMQ's "
                                                             "system property rocketmq.broker.diskSpaceWarningLevelRatio, 0.90)"),
    ("messageDelayLevel", _str, DEFAULT_DELAY_LEVELS, "delay levels, e.g. '1s 5s 1m'"),
    ("timerMaxDelaySec", _int_in(1, 100 * 365 * 86_400), "34560000",
     "the furthest a timer (TIMER_DELAY_SEC/_MS, TIMER_DELIVER_MS) may ask, seconds (400 days; 5.x's is 3 days)"),
    ("maxHashSlotNum", _int_in(1, 50_000_000), "5000000", "IndexFile hash slots"),
    ("maxIndexNum", _int_in(2, 200_000_000), "20000000", "IndexFile entries"),
    ("messageIndexEnable", _bool, "true", ""),
    ("checkCRCOnRecover", _bool, "true", ""),
    ("verifyBodyCrcOnRead", _choice("cold", "all", "off"), "cold",
     "a pull checks records' bodies against their CRCs and leaves a damaged one out (logged and quarantined; its "
     "queue moves past it): cold = records written before this start or beyond the in-memory window, which may "
     "come from the disk; all = every record (~1 us more per 1 KiB message pulled)"),
    ("rejectTransactionMessage", _bool, "false",
     "refuse transactional half messages (TRAN_MSG=true) with NO_PERMISSION (false: transactions are served)"),
    ("storeReplyMessageEnable", _bool, "true", "store a request's reply in <cluster>_REPLY_TOPIC as well as "
                                                "pushing it to the requester"),
    ("enablePropertyFilter", _bool, "false", "accept SQL92 subscriptions (MessageSelector.bySql) and filter pulls by them"),
    ("filterSupportRetry", _bool, "false", "apply a group's SQL92 filter to its retry topic's messages too"),
    ("transactionTimeOut", _int_in(0, 86_400_000), "6000",
     "ms a half message is left alone before it is checked back (a message's CHECK_IMMUNITY_TIME_IN_SECONDS wins)"),
    ("transactionCheckMax", _int_in(1, 1000), "15", "check-backs of a half message before it is discarded"),
    ("transactionCheckInterval", _int_in(100, 86_400_000), "60000", "ms between two check-back passes"),
    ("maxTransferCountOnMessageInMemory", _int_in(1, 65536), "32", "most messages one pull returns"),
    ("maxTransferBytesOnMessageInMemory", _int_in(1024, 2**30), "262144", "most bytes one pull returns"),
    ("maxTransferCountOnMessageInDisk", _int_in(1, 65536), "8", "most messages one pull returns from disk"),
    ("maxTransferBytesOnMessageInDisk", _int_in(1024, 2**30), "65536", "most bytes one pull returns from disk"),
    ("accessMessageInMemoryMaxRatio", _int_in(0, 100), "40",
     "percent of RAM behind the CommitLog's end whose messages count as in memory, not on disk"),
    # rocketbox's own keys
    ("readerProcessNums", _int_in(1, 64), "2", "reader processes behind HAProxy"),
    ("readerPortBase", _int_in(0, 65535), "0", "reader i listens on 127.0.0.1:<base + i> (0: listenPort + 20)"),
    ("metricsPort", _int_in(0, 65535), "5557", "the metrics role serves Prometheus' /metrics here (0: no metrics role)"),
    ("grpcListenPort", _int_in(0, 65535), "8081", "the gRPC front serves RocketMQ 5.x's clients here (the 5.x "
                                                 "proxy's port; 0: no gRPC front)"),
    ("grpcMinInvisibleTimeMs", _int_in(1, 43_200_000), "10000",
     "shortest invisible time a 5.x consumer's receive may ask (the 5.x proxy's minInvisibleTimeMillsForRecv)"),
    ("startNameServer", _bool, "true", "appliance start runs a name server on namesrvAddr's first address when it is "
                                       "on this host (false: this broker only registers there, e.g. a second broker "
                                       "on the host)"),
    ("haproxyBinary", _str, "", "HAProxy executable (default: haproxy on PATH, else /usr/sbin/haproxy)"),
    ("shmPrefix", _str, "", "prefix of shared memory and semaphore names (default /rbx-<listenPort>)"),
    ("ringSlots", _int_in(1, 256), "8", "producer ring pairs: readers + tools + benchmarks"),
    ("ringRequestBytes", _int_in(64 * 1024, 2**31), "16777216", "capacity of each request ring"),
    ("ringResponseBytes", _int_in(64 * 1024, 2**31), "4194304", "capacity of each response ring"),
    ("maxTopicQueueNums", _int_in(1024, 65536), "1024", "most read or write queues of one topic (the built-in "
                                                         "BenchmarkTest has 1024)"),
    ("shmQueueSlots", _int_in(16, 2**24), "131072", "most topic-queues the appliance can hold (148 B of shared "
                                                     "memory each: 100,000 queues, 12,500 topics of 8, fit the default)"),
    ("shmTopicSlots", _int_in(16, 2**22), "16384", "most topics the appliance can hold"),
    ("shmOffsetSlots", _int_in(16, 2**22), "65536", "most (topic, group, queue) consumer offsets the appliance can hold"),
    ("shmClientRows", _int_in(16, 2**20), "1024", "most consumer group members one reader can hold (a consumer takes one per group)"),
    ("writerBatchBytes", _int_in(64 * 1024, 2**31), "8388608", "most bytes the writer takes from one ring per pass"),
    ("dispatchPaceMs", _int_in(0, 1000), "10",
     "under load, a dispatcher pass at most every N ms unless a long poll waits (0: every write)"),
)
_BY_KEY = {row[0]: row for row in TABLE}
ALIASES = {"mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue", "mapedFileSizeCommitLog": "mappedFileSizeCommitLog"}


@dataclass(frozen=True)
class BrokerConfig:
    brokerClusterName: str
    brokerName: str
    brokerId: int
    brokerIP1: str
    listenPort: int
    namesrvAddr: str
    kvConfigPath: str
    storePathRootDir: str
    storePathCommitLog: str
    brokerRole: str
    haMasterAddress: str
    slaveReadEnable: bool
    slaveTimeout: int
    haSlaveFallbehindMax: int
    haTransferBatchSize: int
    haSendHeartbeatInterval: int
    haHousekeepingInterval: int
    flushDiskType: str
    mappedFileSizeCommitLog: int
    mappedFileSizeConsumeQueue: int
    maxMessageSize: int
    defaultTopicQueueNums: int
    autoCreateTopicEnable: bool
    autoCreateSubscriptionGroup: bool
    clusterTopicEnable: bool
    brokerTopicEnable: bool
    flushIntervalCommitLog: int
    flushCommitLogLeastPages: int
    flushCommitLogThoroughInterval: int
    flushIntervalConsumeQueue: int
    syncFlushTimeout: int
    osPageCacheBusyTimeOutMills: int
    waitTimeMillsInSendQueue: int
    deleteWhen: str
    fileReservedTime: int
    diskMaxUsedSpaceRatio: int
    diskSpaceCleanForciblyRatio: int
    cleanFileForciblyEnable: bool
    cleanResourceInterval: int
    scrubBytesPerSecond: int
    scrubIntervalHours: int
    diskSpaceWarningLevelRatio: int
    messageDelayLevel: str
    timerMaxDelaySec: int
    maxHashSlotNum: int
    maxIndexNum: int
    messageIndexEnable: bool
    checkCRCOnRecover: bool
    verifyBodyCrcOnRead: str
    rejectTransactionMessage: bool
    storeReplyMessageEnable: bool
    enablePropertyFilter: bool
    filterSupportRetry: bool
    transactionTimeOut: int
    transactionCheckMax: int
    transactionCheckInterval: int
    maxTransferCountOnMessageInMemory: int
    maxTransferBytesOnMessageInMemory: int
    maxTransferCountOnMessageInDisk: int
    maxTransferBytesOnMessageInDisk: int
    accessMessageInMemoryMaxRatio: int
    readerProcessNums: int
    readerPortBase: int
    metricsPort: int
    grpcListenPort: int
    grpcMinInvisibleTimeMs: int
    startNameServer: bool
    haproxyBinary: str
    shmPrefix: str
    ringSlots: int
    ringRequestBytes: int
    ringResponseBytes: int
    maxTopicQueueNums: int
    shmQueueSlots: int
    shmTopicSlots: int
    shmOffsetSlots: int
    shmClientRows: int
    writerBatchBytes: int
    dispatchPaceMs: int
    source: str = "<defaults>"

    # ---------------------------------------------------------------- derived
    @property
    def root(self) -> str:
        return self.storePathRootDir

    @property
    def commitlog_dir(self) -> str:
        return self.storePathCommitLog or os.path.join(self.root, "commitlog")

    @property
    def data_dirs(self) -> list[str]:
        """The directories the appliance writes: the store root, and the CommitLog's when
        ``storePathCommitLog`` puts it elsewhere (often a disk of its own)."""
        root, cl = os.path.abspath(self.root), os.path.abspath(self.commitlog_dir)
        return [root] if os.path.commonpath([root, cl]) == root else [root, cl]

    @property
    def in_memory_bytes(self) -> int:
        """How far behind the CommitLog's end a message still counts as in memory
        (store:DefaultMessageStore#checkInDiskByCommitOffset): ``accessMessageInMemoryMaxRatio``
        percent of this machine's RAM."""
        import psutil
        return psutil.virtual_memory().total * self.accessMessageInMemoryMaxRatio // 100

    @property
    def kv_config_path(self) -> str:
        return self.kvConfigPath or os.path.join(self.root, "namesrv", "kvConfig.json")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.root, "index")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, "config")

    @property
    def run_dir(self) -> str:
        """Slot lock files and the role pid files (not a RocketMQ path; RocketMQ ignores it)."""
        return os.path.join(self.root, "run")

    def reader_port(self, index: int) -> int:
        return (self.readerPortBase or self.listenPort + 20) + index

    @property
    def broker_addr(self) -> str:
        """What clients connect to and the name servers hand out: HAProxy's listener."""
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def sync_flush(self) -> bool:
        return self.flushDiskType == "SYNC_FLUSH"

    @property
    def slave(self) -> bool:
        return self.brokerRole == "SLAVE"

    @property
    def ha_addr(self) -> str:
        """Where this broker's HA service listens (a master's; 4.9.8 forces listenPort + 1)."""
        return f"{self.brokerIP1}:{self.listenPort + 1}"

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.messageDelayLevel)

    @property
    def max_record_size(self) -> int:
        return self.maxMessageSize + 64 * 1024

    def geometry(self):
        from rocketbox.shm.state import Geometry
        return Geometry(self.shmPrefix, self.ringSlots, self.ringRequestBytes, self.ringResponseBytes,
                        self.shmQueueSlots, self.shmTopicSlots, self.shmOffsetSlots, self.shmClientRows)


def _parse_lines(text: str, source: str):
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = [i for i in (line.find("="), line.find(":")) if i > 0]
        if cut:
            i = min(cut)
            key, value = line[:i].strip(), line[i + 1:].strip()
        else:
            key, _, value = line.partition(" ")
            key, value = key.strip(), value.strip()
        yield lineno, key, value


def _nearest(key: str) -> str:
    """``; did you mean 'x'?`` for the known key nearest ``key`` (case and spelling), or nothing."""
    import difflib
    known = {k.lower(): k for k in [*_BY_KEY, *ALIASES]}
    close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.75)
    return f"; did you mean '{ALIASES.get(known[close[0]], known[close[0]])}'?" if close else ""


def load(path: str | None = None, overrides: dict[str, str] | None = None) -> BrokerConfig:
    """Build the config from the table's defaults, then ``path``, then ``overrides``."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    entries = []
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
        entries += [(f"{path}:{ln}", k, v) for ln, k, v in _parse_lines(text, path)]
    entries += [("override", k, v) for k, v in (overrides or {}).items()]
    for where, key, value in entries:
        key = ALIASES.get(key, key)
        row = _BY_KEY.get(key)
        if row is None:
            raise ConfigError(f"{where}: unknown key '{key}' (value '{value}'){_nearest(key)}")
        try:
            values[key] = row[1](value)
        except ValueError as e:
            raise ConfigError(f"{where}: bad value for '{key}': '{value}': {e}") from None
        origin[key] = where
    for key, parser, default, _doc in TABLE:
        if key not in values:
            values[key] = parser(default() if callable(default) else default)
    if values["brokerRole"] != "SLAVE":
        values["brokerId"] = 0           # as 4.9.8's BrokerStartup: a master is broker 0
    if not values["shmPrefix"]:
        values["shmPrefix"] = f"/rbx-{values['listenPort']}"
    cfg = BrokerConfig(**values, source=path or "<defaults>")
    _check_relations(cfg, origin)
    return cfg


def _check_relations(cfg: BrokerConfig, origin: dict[str, str]) -> None:
    def fail(key, why):
        raise ConfigError(f"{origin.get(key, 'default')}: bad value for '{key}': '{getattr(cfg, key)}': {why}")
    try:
        cfg.delay_levels_ms
    except ValueError as e:
        fail("messageDelayLevel", str(e))
    if cfg.brokerRole == "SLAVE" and cfg.brokerId <= 0:
        fail("brokerId", "Slave's brokerId must be > 0")
    if cfg.max_record_size + 64 > cfg.mappedFileSizeCommitLog:
        fail("mappedFileSizeCommitLog", f"must hold the largest record (maxMessageSize {cfg.maxMessageSize} + 64 KiB)")
    if cfg.ringRequestBytes < 2 * (cfg.max_record_size + 4096):
        fail("ringRequestBytes", f"must be at least twice the largest record ({cfg.max_record_size} bytes)")
    if not cfg.shmPrefix.startswith("/") or "/" in cfg.shmPrefix[1:]:
        fail("shmPrefix", "must start with '/' and contain no other '/'")
    for h in cfg.deleteWhen.split(";"):
        if not h.strip().isdigit() or not 0 <= int(h) <= 23:
            fail("deleteWhen", "expected hours 0-23 separated by ';'")


def describe(cfg: BrokerConfig) -> str:
    return "\n".join(f"{f.name}={getattr(cfg, f.name)}" for f in fields(cfg) if f.name != "source")
