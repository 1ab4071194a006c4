"""``search``: messages by key, uniqKey or store-time range across topics (keys and uniqKeys found
through the IndexFile when the session pushes filters down, by scanning otherwise).

    spark-submit spark/jobs/search.py --path STORE [--key K] [--uniq-key ID] [--since T] [--until T] [--pattern RX]
    appliance spark search --path STORE --key order-42
"""
from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def search(spark, root: str, *, key=None, uniq_key=None, since=None, until=None, pattern=".*"):
    """The matching messages (the source's columns), oldest first."""
    from pyspark.sql import functions as F

    from rocketbox.spark.source import _time_ms
    df = spark.read.format("rocketbox").option("path", root).option("topicPattern", pattern).load()
    if uniq_key:
        df = df.where(F.col("uniqKey") == uniq_key)
    if key:
        df = df.where(F.array_contains(F.split("keys", " "), key))
    if since:
        df = df.where(F.col("storeTimestamp") >= F.timestamp_millis(F.lit(_time_ms(since))))
    if until:
        df = df.where(F.col("storeTimestamp") < F.timestamp_millis(F.lit(_time_ms(until))))
    return df.orderBy("storeTimestamp", "topic", "queueId", "queueOffset")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="search", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="the store's storePathRootDir")
    ap.add_argument("--key", help="one of the message's KEYS")
    ap.add_argument("--uniq-key", help="its msgId as the producer saw it (UNIQ_KEY)")
    ap.add_argument("--since", help="stored at or after (epoch ms or ISO 8601, UTC)")
    ap.add_argument("--until", help="stored before")
    ap.add_argument("--pattern", default=".*", help="topics, a regular expression (default: all)")
    ap.add_argument("--max-body", type=int, default=80)
    args = ap.parse_args(argv)
    if not (args.key or args.uniq_key or args.since or args.until):
        ap.error("say what to look for: --key, --uniq-key, --since or --until")
    from rocketbox.spark import session
    spark = session("rocketbox-search")
    try:
        rows = search(spark, args.path, key=args.key, uniq_key=args.uniq_key, since=args.since, until=args.until,
                      pattern=args.pattern).collect()
    finally:
        spark.stop()
    for r in rows:
        body = r.body[:args.max_body].decode("utf-8", "replace")
        print(f"{r.storeTimestamp.isoformat()} {r.topic}:{r.queueId}@{r.queueOffset} msgId={r.uniqKey} "
              f"offsetMsgId={r.msgId} tags={r.tags} keys={r.keys} {body}")
    print(f"{len(rows)} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
