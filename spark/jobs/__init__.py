"""Spark jobs over a store's files, each a module with ``main(argv)``, runnable with
``spark-submit spark/jobs/<job>.py ...`` and ``appliance spark <job> ...``: ``audit``,
``export``, ``lag``, ``search``."""
JOBS = ("audit", "export", "lag", "search")
