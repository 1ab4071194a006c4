"""Seeded messages for the differential fuzz tests (#49): what clients send, and what they should not.

``generate(seed, n)`` returns sends (a single message or a batch of 1-256) whose messages carry
property names and values with spaces, runs of spaces, the 0x01 / 0x02 separators inside values,
empty values, unicode, very long values, KEYS with several keys, TAGS or not, UNIQ_KEY or not,
delay levels and timers (good and bad values), and bodies of 0 B up to ``max_body``; stretches of
sends carry no KEYS at all (as Java clients send unless asked).  Each message's
properties are kept as the ordered pairs a client sends and encoded as the 4.9.8 Java client
encodes them (``name\\x01value\\x02`` for each pair, so a trailing separator).  The same seed
gives the same sends on any machine.  ``describe`` shows one message short enough to read in a
failure (the one that caused it).
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

NAMES = ["note", "a", "k", "中文名", "x-trace", "Empty", "sp ace"]
WORDS = ["two words", "  lead", "trail  ", "a  b   c", "", "中文 ✓", "tab\there", "x", "0", "v\x01w", "p\x02q",
         "\x01", "\x02", "é", "🙂 emoji"]
DELAYS = ("1", "2", "0", "99", "-1", "abc", "", " 1", "+1", "1_0")
UNTIMED_DELAYS = ("0", "99", "-1", "abc", "", " 1", "1_0")   # none due within a test: the same place on any broker
TIMERS = ["1200", "+900", " 5 ", "1_000", "abc", "-5", "9223372036854775807"]


@dataclass
class Msg:
    body: bytes
    pairs: list[tuple[str, str]] = field(default_factory=list)
    flag: int = 0

    def properties(self) -> str:
        """As the 4.9.8 Java client writes them (``MessageDecoder.messageProperties2String``)."""
        return "".join(f"{k}\x01{v}\x02" for k, v in self.pairs)

    def get(self, name: str) -> str | None:
        return next((v for k, v in reversed(self.pairs) if k == name), None)


@dataclass
class Send:
    topic: str
    queue_id: int
    msgs: list[Msg]
    batch: bool


def _value(rng: random.Random, in_batch: bool) -> str:
    r = rng.random()
    if r < 0.65:
        return rng.choice(WORDS)
    if r < 0.97:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
    if in_batch:
        return "L" * rng.choice([300, 3000])
    return "L" * rng.choice([300, 3000, 20000, 40000])     # long; past 32,767 bytes the properties are refused


def _body(rng: random.Random, max_body: int) -> bytes:
    r = rng.random()
    n = 0 if r < 0.05 else rng.randint(1, 64) if r < 0.6 else rng.randint(65, 2048) if r < 0.97 else \
        rng.randint(2049, max_body)
    return rng.randbytes(min(n, max_body))


def _msg(rng: random.Random, i: int, max_body: int, in_batch: bool, delays: tuple, timers: bool, keys: bool) -> Msg:
    pairs: list[tuple[str, str]] = []
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        pairs.append((rng.choice(NAMES), _value(rng, in_batch)))
    if rng.random() < 0.6:
        pairs.append(("TAGS", rng.choice(["TagA", "TagB", "标签", "", "with space", "TagA||TagB"])))
    if keys and rng.random() < 0.5:
        some = [f"k{i}", f"key-{i % 7}", "中文键", "", " "]
        pairs.append(("KEYS", (" " * rng.randint(1, 3)).join(rng.sample(some, rng.randint(1, 4)))))
    if rng.random() < 0.8:
        pairs.append(("UNIQ_KEY", f"FUZZ{i:016X}"))
    if delays and not in_batch and rng.random() < 0.05:
        pairs.append(("DELAY", rng.choice(delays)))
    if timers and not in_batch and rng.random() < 0.05:
        pairs.append((rng.choice(["TIMER_DELAY_MS", "TIMER_DELAY_SEC"]), rng.choice(TIMERS)))
    rng.shuffle(pairs)
    return Msg(_body(rng, max_body), pairs, flag=rng.choice([0, 0, 0, 7]))


def generate(seed: int, n: int, *, topics=("Fz0", "Fz1"), queues: int = 4, max_body: int = 4 * 1024 * 1024,
             max_batch: int = 256, delays: tuple = DELAYS, timers: bool = True) -> list[Send]:
    """Sends holding ``n`` messages in all; ``delays``: the DELAY values to draw from (none: no DELAY)."""
    rng = random.Random(seed)
    out, made, keys = [], 0, True
    while made < n:
        if rng.random() < 0.1:            # stretches of sends with no KEYS at all (what Java clients send)
            keys = not keys
        batch = rng.random() < 0.2
        size = min(n - made, rng.choice([1, 2, 8, 32, 64, 100, max_batch]) if batch else 1)
        msgs = [_msg(rng, made + k, max_body if not batch else min(max_body, 4096), batch, delays, timers, keys)
                for k in range(size)]
        out.append(Send(rng.choice(topics), rng.randrange(queues), msgs, batch))
        made += size
    return out


def describe(m: Msg) -> str:
    """One message, shortened for a failure's message: long values and bodies cut."""
    pairs = [(k, v if len(v) <= 40 else f"{v[:20]}...({len(v)} chars)") for k, v in m.pairs]
    return f"Msg(body={len(m.body)} bytes {m.body[:16]!r}..., flag={m.flag}, pairs={pairs!r})"


def tree(root: str, sub: str) -> dict[str, bytes]:
    """Every file under ``root/sub``: relative path -> bytes."""
    base = os.path.join(root, sub)
    out = {}
    for d, _dirs, files in os.walk(base):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), base)] = fh.read()
    return out


def redispatch_differences(cfg, root: str, tag: str, **settings) -> list[str]:
    """Re-dispatch ``cfg``'s CommitLog on the scalar path, record by record, into a fresh store at
    ``root`` (recovery rebuilding every consume queue and the index), and name what differs from
    ``cfg``'s own consume queues and IndexFiles, byte for byte (empty: nothing)."""
    import shutil

    from rocketbox.appliance.inprocess import running_store, small_config
    from rocketbox.dispatcher import service
    from rocketbox.shm.layout import C
    again = small_config(root, tag, **settings)
    shutil.copytree(cfg.commitlog_dir, again.commitlog_dir)
    shutil.copytree(cfg.config_dir, again.config_dir)
    out, few = [], service.FEW_RECORDS
    service.FEW_RECORDS = 10**9
    try:
        with running_store(again) as (sh, *_):
            if sh.control[C.DISPATCH_UNINDEXED] or sh.control[C.DISPATCH_UNQUEUED]:
                out.append("the scalar re-dispatch contained records")
    finally:
        service.FEW_RECORDS = few
    for sub in ("consumequeue", "index"):
        live, rebuilt = tree(cfg.root, sub), tree(again.root, sub)
        if live != rebuilt:
            names = sorted(set(live) | set(rebuilt))
            out.append(f"{sub} differs: " + ", ".join(n for n in names if live.get(n) != rebuilt.get(n))[:300])
    return out
