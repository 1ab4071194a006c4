"""A CommitLog record's field offsets are declared once (#50): ``store/message.py`` derives every
offset, struct and header size from ``FIELDS``; no other module types one as a number."""
import os
import re

from rocketbox.store import message

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FOLDERS = ("appliance", "bench", "cleaner", "client", "dispatcher", "flusher", "haproxy", "nameserver", "net",
           "readers", "remoting", "scheduler", "shm", "spark", "store", "writer")
# an offset into a record (past its first 28 bytes, where small numbers mean many things) added to a
# position, or a slice starting there: what `mm[36:40]` and `at + 84` looked like
OFFSETS = sorted({v for v in message.AT.values() if v >= 28} | {message.HEADER_V4_SIZE})
TYPED = re.compile(r"\b(?:at|pos|offset|start|phys|base)\s*\+\s*(%s)\b|\[(%s):" % (
    "|".join(map(str, OFFSETS)), "|".join(map(str, OFFSETS))))


def test_the_header_is_derived_from_its_declaration():
    assert list(message.AT) == [name for name, _ in message.FIELDS]
    assert message.HEADERS[0].size == message.AT["body_len"] + 4 == message.HEADER_V4_SIZE
    assert message.HEADERS[3].size == message.HEADER_V4_SIZE + 2 * message.HOST_V6_EXTRA
    assert message.PREFIX.size == message.AT["born_ts"]
    rec = message.encode_record(topic=b"T", queue_id=3, body=b"xyz", properties=b"a\x01b", flag=5, born_ts=7,
                                reconsume_times=2, queue_offset=11, phys_offset=13, store_ts=17)
    h = next(message.record_fields(rec))[0]
    for name in ("queue_id", "flag", "queue_offset", "phys_offset", "born_ts", "store_ts", "reconsume_times"):
        fmt = dict(message.FIELDS)[name]
        assert int.from_bytes(rec[message.AT[name]:message.AT[name] + (8 if fmt == "q" else 4)], "big") == \
            getattr(h, name), name


def test_no_module_but_the_layout_types_a_record_offset():
    found = []
    for folder in FOLDERS:
        for d, _dirs, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                path = os.path.join(d, f)
                if not f.endswith(".py") or path.endswith(os.path.join("store", "message.py")):
                    continue
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        if TYPED.search(line.split("#")[0]):
                            found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not found, found
