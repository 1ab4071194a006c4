"""``config/*.json`` files (FACTS §3.9, §5.6): topics.json, consumerOffset.json, ...

Write: ``<file>.tmp`` -> old file copied to ``<file>.bak`` -> rename, TAB-indented like fastjson's
pretty printer.  Read: tolerant of fastjson's unquoted integer map keys (``{0:6,1:3}``); falls back
to ``.bak`` when the main file is missing, empty or corrupt (logged when it was there).  Each file has exactly one writing
process (named where it is used); this module keeps no state of its own (``Members`` is its
owner's: a large mapping laid out member by member, for a file written again after each change).
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import re
import shutil

import orjson

from rocketbox.store.errors import StoreError

log = logging.getLogger("rocketbox.store")
# an unquoted integer key: after '{' or ',' (and whitespace), digits, then ':'
_UNQUOTED_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def loads_tolerant(text: str):
    """JSON as Java writes it: orjson first (~3x json on a large topic table), json for what only
    it reads (integers past 64 bits, NaN), then fastjson's unquoted integer keys quoted."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_UNQUOTED_KEY.sub(r'\1"\2"\3', text))


def loads_object(body: bytes) -> dict:
    """A request body that must be a JSON object (as a Java client writes it), or ValueError
    saying it is not JSON, or not an object."""
    try:
        data = loads_tolerant(body.decode("utf-8"))
    except ValueError as e:                 # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def read(path: str):
    """The parsed file, else its ``.bak``, else None when neither exists.  Both present but
    unreadable is a StoreError naming both paths."""
    errors: list[str] = []
    for p in (path, path + ".bak"):
        if not os.path.exists(p):
            continue
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read()
            if text.strip():
                data = loads_tolerant(text)
                if errors:          # the main file was there but unreadable: an older state is used
                    log.error("%s; read %s instead: what was saved after it is lost", errors[0], p)
                return data
            errors.append(f"{p}: empty")
        except (OSError, ValueError) as e:
            errors.append(f"{p}: {e}")
    if errors:
        raise StoreError("cannot read config file: " + "; ".join(errors))
    return None


def dumps(data) -> bytes:
    """``data`` laid out as fastjson's pretty printer does (TAB-indented; keys sorted), the bytes
    ``json.dumps(data, indent="\t", sort_keys=True, ensure_ascii=False)`` gives, ~5x faster:
    ``json`` indents in pure Python (57 ms for 65,536 consumer offsets, in the writer's loop),
    orjson in C, two spaces a level, which become tabs a depth at a time, deepest first (a line's
    leading spaces are all indentation: JSON strings hold no raw newline)."""
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    depth = 1
    while b"\n" + b"  " * depth in text:
        depth += 1
    for k in range(depth - 1, 0, -1):
        text = text.replace(b"\n" + b"  " * k, b"\n" + b"\t" * k)
    return text


class Members:
    """The members of a file's one large mapping (topics.json's topicConfigTable), each laid out
    once by ``dumps`` and kept in key order, for a file written again after every change of one
    member: ``dumps`` of the whole file lays out every member each time (~26 ms at 16,384 topics,
    in the writer's loop); ``file`` joins them (~1 ms), the same bytes."""

    def __init__(self, key: str, members: dict):
        self.key = key
        self.names = sorted(members)
        self.laid = [self._lay_out(name, members[name]) for name in self.names]

    @staticmethod
    def _lay_out(name: str, value) -> bytes:
        """``"name": value`` as ``dumps`` lays it out two levels in (JSON strings hold no raw
        newline: every newline starts a line, and each line takes one more TAB)."""
        text = dumps({name: value})                  # b'{\n\t"name": ...\n}'
        return b"\t" + text[2:-2].replace(b"\n", b"\n\t")

    def put(self, name: str, value) -> None:
        i = bisect.bisect_left(self.names, name)
        if i < len(self.names) and self.names[i] == name:
            self.laid[i] = self._lay_out(name, value)
        else:
            self.names.insert(i, name)
            self.laid.insert(i, self._lay_out(name, value))

    def remove(self, name: str) -> None:
        i = bisect.bisect_left(self.names, name)
        if i < len(self.names) and self.names[i] == name:
            del self.names[i], self.laid[i]

    def file(self, others: dict) -> bytes:
        """``dumps`` of ``others`` with these members under ``key`` beside them."""
        text = dumps({**others, self.key: {}})
        if not self.laid:
            return text
        head = b'\n\t"' + self.key.encode() + b'": '
        return text.replace(head + b"{}", head + b"{\n" + b",\n".join(self.laid) + b"\n\t}", 1)


def write(path: str, data) -> None:
    """Persist ``data`` durably: tmp file fsynced, old copied to .bak, then renamed into place."""
    write_bytes(path, dumps(data))


def write_bytes(path: str, text: bytes) -> None:
    """``write`` of a file's bytes already laid out (``dumps``, then touched up by its owner)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        shutil.copyfile(path, path + ".bak")
    os.replace(tmp, path)


_QUEUE_ID_KEY = re.compile(rb'\n\t\t\t"(-?\d+)":')


def unquote_queue_ids(text: bytes) -> bytes:
    """consumerOffset.json as fastjson writes it (FACTS §5.6): the queue ids, Integer map keys,
    unquoted (``{0:6,1:3}``; ``loads_tolerant`` reads them back).  In ``dumps``' layout they are
    the only keys three tabs deep and the only keys followed by a number, so two passes of plain
    replaces find them (~5 ms over 65,536 offsets, a regex ~60 ms) -- unless a group's name holds
    a quote (escaped ``\\"``) that a plain replace could take for a key's end: then the regex."""
    if b'\\"' in text:
        return _QUEUE_ID_KEY.sub(rb"\n\t\t\t\1:", text)
    text = text.replace(b'\n\t\t\t"', b"\n\t\t\t")
    for c in b"-0123456789":
        text = text.replace(b'": %c' % c, b": %c" % c)
    return text
