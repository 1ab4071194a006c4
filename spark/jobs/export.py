"""``export``: topics to Parquet, partitioned by topic and date (the store time's UTC day).

    spark-submit spark/jobs/export.py --path STORE --out DIR [--topic T1,T2 | --pattern 'Orders.*']
    appliance spark export --path STORE --out DIR --topic T
"""
from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def export(spark, root: str, out: str, topic: str | None = None, pattern: str | None = None) -> int:
    """Write the topics' messages under ``out``/topic=T/date=YYYY-MM-DD -> how many."""
    from pyspark.sql import functions as F
    reader = spark.read.format("rocketbox").option("path", root)
    reader = reader.option("topicPattern", pattern) if pattern else reader.option("topic", topic)
    df = reader.load().withColumn("date", F.to_date("storeTimestamp")).cache()
    n = df.count()
    df.write.mode("overwrite").partitionBy("topic", "date").parquet(out)
    df.unpersist()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="the store's storePathRootDir")
    ap.add_argument("--out", required=True, help="the Parquet directory (replaced)")
    ap.add_argument("--topic", help="a topic or a comma list")
    ap.add_argument("--pattern", help="a regular expression over topic names (default: every topic)")
    args = ap.parse_args(argv)
    from rocketbox.spark import session
    spark = session("rocketbox-export")
    try:
        n = export(spark, args.path, args.out, args.topic, args.pattern or (None if args.topic else ".*"))
    finally:
        spark.stop()
    print(f"exported {n} messages of {args.path} to {args.out} (partitioned by topic and date)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
