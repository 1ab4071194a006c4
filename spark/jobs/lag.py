"""``lag``: each consumer group's committed offsets (``config/consumerOffset.json``) against its
queues' max offsets (the consume queues' valid entries): a table of group, topic, queue, broker
offset, consumer offset and lag, and a PNG bar chart of lag per group and queue.

    spark-submit spark/jobs/lag.py --path STORE [--png lag.png]
    appliance spark lag --path STORE --png lag.png
"""
from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

COLUMNS = "group string, topic string, queueId int, brokerOffset long, consumerOffset long, lag long"


def committed(root: str) -> list[tuple[str, str, int, int]]:
    """(group, topic, queue id, committed offset) of consumerOffset.json (fastjson's; its .bak
    when the file is unreadable)."""
    from rocketbox.store import configfile
    data = configfile.read(os.path.join(root, "config", "consumerOffset.json")) or {}
    out = []
    for key, queues in (data.get("offsetTable") or {}).items():
        topic, _, group = key.partition("@")
        for q, off in queues.items():
            out.append((group, topic, int(q), int(off)))
    return out


def lag(spark, root: str):
    """A DataFrame (``COLUMNS``), one row per group and queue, largest lag first."""
    from rocketbox.spark import storefiles
    store = storefiles.Store(root)
    rows = committed(root)
    have = set(store.topics())
    ends = spark.sparkContext.parallelize(sorted({(t, q) for _g, t, q, _o in rows if t in have}), 4) \
        .map(lambda tq: (tq[0], tq[1], storefiles.Store(root).bounds(*tq)[1])).collect()
    top = {(t, q): hi for t, q, hi in ends}
    table = [(g, t, q, top.get((t, q), 0), off, max(top.get((t, q), 0) - off, 0)) for g, t, q, off in rows]
    return spark.createDataFrame(table, COLUMNS).orderBy("lag", ascending=False)


def chart(rows, path: str) -> None:
    """A bar per group and queue, its lag."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r.group}\n{r.topic}:{r.queueId}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 2), 4.5))
    ax.bar(range(len(rows)), [r.lag for r in rows], color="#d9534f")
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("messages behind")
    ax.set_title("consumer lag per group and queue")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="lag", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", required=True, help="the store's storePathRootDir")
    ap.add_argument("--png", help="write the chart here")
    args = ap.parse_args(argv)
    from rocketbox.spark import session
    spark = session("rocketbox-lag")
    try:
        rows = lag(spark, args.path).collect()
    finally:
        spark.stop()
    print(f"{'#Group':<32} {'#Topic':<32} {'#Queue':>6} {'#Broker':>12} {'#Consumer':>12} {'#Lag':>10}")
    for r in rows:
        print(f"{r.group:<32} {r.topic:<32} {r.queueId:>6} {r.brokerOffset:>12} {r.consumerOffset:>12} {r.lag:>10}")
    if args.png:
        chart(rows, args.png)
        print(f"chart: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
