"""A store config for in-process writer/dispatcher tests: small files, a private shm prefix
(``appliance/inprocess.py``, which the benchmarks use too)."""
from rocketbox.appliance.inprocess import running_store, small_config

__all__ = ["running_store", "small_config"]
