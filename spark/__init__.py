"""rocketbox's Spark side: a PySpark data source over the store's files (``source.py``, planning
and reading in ``storefiles.py``), registered as ``rocketbox``.

    from rocketbox.spark import register, session
    spark = session()                      # local[2], this venv's Python on the workers
    spark.read.format("rocketbox").option("path", "data/store").option("topic", "T").load()
"""
from __future__ import annotations

import os
import sys


def register(spark) -> None:
    """Register the ``rocketbox`` data source with a SparkSession, taking filters when the
    session lets Python data sources take them (``spark.sql.python.filterPushdown.enabled``;
    a reader that takes filters where it is false fails to plan): register again after changing
    that setting."""
    from rocketbox.spark.source import RocketboxSource
    on = (spark.conf.get("spark.sql.python.filterPushdown.enabled", "false") or "").lower() == "true"
    source = type("RocketboxSource", (RocketboxSource,), {"pushdown": on, "__module__": RocketboxSource.__module__})
    spark.dataSource.register(source)


def session(app: str = "rocketbox", master: str = "local[2]", **conf):
    """A SparkSession whose Python workers run this interpreter (so they import pyarrow and
    this package), with filter pushdown to Python data sources on, and ``rocketbox`` registered."""
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    b = SparkSession.builder.master(master).appName(app).config("spark.ui.enabled", "false") \
        .config("spark.sql.python.filterPushdown.enabled", "true").config("spark.sql.session.timeZone", "UTC")
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    register(spark)
    return spark
