"""pyspark finds Python data sources by themselves in modules named ``pyspark_*`` that define
``DefaultSource`` (``pyspark/sql/worker/lookup_data_sources.py``): with rocketbox installed,
``spark.read.format("rocketbox")`` works in any session, without ``spark.register``.  Filters are
not pushed down then (pushdown needs the session's setting, which ``spark.register`` reads)."""
from rocketbox.spark.source import RocketboxSource as DefaultSource

__all__ = ["DefaultSource"]
