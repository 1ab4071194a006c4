"""The quarantine: what the store lost to damage, kept for the operator.

``<storePathRootDir>/quarantine/`` (not a RocketMQ path; RocketMQ ignores it) holds
``quarantine.json``, one entry per damaged CommitLog span that a tombstone replaced
(``store/salvage.py``), and each span's original bytes as ``<20-digit offset>.bin``, so nothing is
thrown away.  An entry:

    {"offset": global CommitLog offset, "length": bytes, "file": CommitLog file, "fileOffset": n,
     "reason": what failed, "topic": ..., "queueId": ..., "queueOffset": ..., "identity": where the
     topic/queue came from ("header", "consume queue", "unknown"), "foundBy": "recovery",
     "time": epoch ms, "bytes": the .bin file or null when it could not be saved}

(``foundBy`` is "recovery", or the process that found it: ``reader-slot<n>``.)

A slave whose master lost its tail cuts its CommitLog back to the master's end (docs/REPLICATION.md);
the bytes it cut, whole records that no master holds any more, are kept as
``cut-<20-digit offset>-<20-digit end>.commitlog`` (``keep_cut``): CommitLog bytes from that offset.

Written by recovery (alone, before any role runs), the file replaced whole (``.tmp``, rename).
A damaged record a running process finds and leaves in place (a reader's pull that checks CRCs)
goes to that process's own ``found-<name>.jsonl``, a JSON line each.  ``load`` gives both.
Read by ``appliance check`` and ``appliance quarantine``.
"""
from __future__ import annotations

import json
import os
import time

from rocketbox.store.mappedfile import offset_to_name

DIR = "quarantine"
LIST = "quarantine.json"


def directory(root: str) -> str:
    return os.path.join(root, DIR)


def load(root: str) -> list[dict]:
    """The entries, oldest first ([] when there are none); a file that does not parse raises
    ValueError naming it.  Damage a running process found and a stop or start buried since is
    listed once, as buried."""
    done = replaced(root)
    return done + _not_in(done, _found(root))


def unburied(root: str) -> list[dict]:
    """Damage running processes found and left in place that no stop or start has made a
    tombstone yet (``appliance.recovery.bury_found``); a file that does not parse raises ValueError."""
    return _not_in(replaced(root), _found(root))


def _not_in(done: list[dict], found: list[dict]) -> list[dict]:
    buried = {e["offset"] for e in done}
    return [e for e in found if e["offset"] not in buried]


def replaced(root: str) -> list[dict]:
    """The spans recovery replaced by tombstones."""
    path = os.path.join(directory(root), LIST)
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except FileNotFoundError:
        return []
    except ValueError as e:
        raise ValueError(f"{path}: not a quarantine list: {e}") from None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: not a quarantine list: expected a JSON list")
    return entries


def _found(root: str) -> list[dict]:
    """Damaged records running processes found and left in place, once each (the first finder's
    entry), in the order found; a line cut short by a kill is skipped."""
    d, out, seen = directory(root), [], set()
    if not os.path.isdir(d):
        return []
    for name in sorted(n for n in os.listdir(d) if n.startswith("found-") and n.endswith(".jsonl")):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    out.sort(key=lambda e: e.get("time", 0))
    unique = []
    for e in out:
        if e["offset"] not in seen:
            seen.add(e["offset"])
            unique.append(e)
    return unique


def note(root: str, source: str, entry: dict, original: bytes) -> None:
    """A damaged record a running process found (and left in place): appended to that process's
    own ``found-<source>.jsonl`` (one writer per file), its bytes saved unless they are already."""
    d = directory(root)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, offset_to_name(entry["offset"]) + ".bin")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(original)
    entry = dict(entry, bytes=path, time=int(time.time() * 1000))
    with open(os.path.join(d, f"found-{source}.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def keep_cut(root: str, offset: int, data) -> str:
    """A slave's CommitLog bytes from ``offset`` that its cut drops, kept durably (written,
    fsynced, then renamed into place).  -> the file's path.  Raises OSError (a full disk): the cut
    must wait then."""
    d = directory(root)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"cut-{offset_to_name(offset)}-{offset_to_name(offset + len(data))}.commitlog")
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def add(root: str, entries: list[dict], originals: list[bytes]) -> None:
    """Append ``entries``, saving each one's original bytes beside the list first (an entry
    whose bytes cannot be written, e.g. on a full disk, says ``"bytes": null``)."""
    d = directory(root)
    os.makedirs(d, exist_ok=True)
    for e, raw in zip(entries, originals):
        path = os.path.join(d, offset_to_name(e["offset"]) + ".bin")
        try:
            with open(path, "wb") as f:
                f.write(raw)
            e["bytes"] = path
        except OSError:
            e["bytes"] = None
    everything = replaced(root) + entries
    tmp = os.path.join(d, LIST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(everything, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, LIST))
