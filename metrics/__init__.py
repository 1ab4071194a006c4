"""The metrics role: Prometheus scrapes of what the other roles publish (docs/METRICS.md)."""
