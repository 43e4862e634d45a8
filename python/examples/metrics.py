"""ironlock's stats as Prometheus metrics through prometheus_client (a custom collector).

Run with node URLs in IRONLOCK_NODES (comma-separated); prints the exposition text once.
"""

import os
from typing import Iterator

from prometheus_client import generate_latest
from prometheus_client.core import REGISTRY, CounterMetricFamily, HistogramMetricFamily, Metric

import ironlock


class IronlockCollector:
    """Reads manager.stats() at every scrape: counters and the two latency histograms."""

    def __init__(self, manager: ironlock.LockManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        stats = self.manager.stats()
        for name, value in stats.items():
            if isinstance(value, int):
                yield CounterMetricFamily(f"ironlock_{name}", f"ironlock {name}", value=value)
        for name in ("acquire", "round"):
            h = stats[f"{name}_latency"]
            bounds = [str(b) for b in h["buckets"]] + ["+Inf"]
            cumulative = [sum(h["counts"][: i + 1]) for i in range(len(bounds))]
            yield HistogramMetricFamily(
                f"ironlock_{name}_seconds", f"ironlock {name} latency",
                buckets=list(zip(bounds, cumulative)), sum_value=h["sum_seconds"],
            )


nodes = os.environ.get("IRONLOCK_NODES", "redis://127.0.0.1:7001").split(",")
manager = ironlock.LockManager(nodes, restart_quarantine=os.environ.get("IRONLOCK_QUARANTINE") != "off")
REGISTRY.register(IronlockCollector(manager))

with manager.lock("report:daily", ttl=10.0):
    pass
print(generate_latest().decode())
