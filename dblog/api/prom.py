"""Prometheus metrics of the running instance, read from ``Control.status()`` at scrape time.

The engine keeps plain running totals (:class:`dblog.spi.metrics.Counters`); this collector
turns one status read into metric families, so a scrape costs one status read and the engine
thread never touches prometheus-client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from dblog.api.service import ApiError, Service


def _gauge(name: str, text: str, value: float | None) -> Iterator[Metric]:
    if value is not None:
        yield GaugeMetricFamily(name, text, value=value)


class StatusCollector(Collector):
    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        try:
            status = self.service.status()
        except ApiError:
            yield GaugeMetricFamily("dblog_up", "1 when the capture runs", value=0)
            return
        view = self.service.status_view()
        role = view.role
        yield GaugeMetricFamily("dblog_up", "1 when the capture runs", value=int(view.running))
        yield GaugeMetricFamily("dblog_leader", "1 when this instance leads (or runs alone)",
                                value=int(role != "standby"))
        yield from _gauge("dblog_epoch", "leadership epoch", view.epoch)
        yield from _gauge("dblog_lag_seconds", "seconds behind the source (commit time of the "
                          "last emitted transaction, 0 when the log reader is caught up)",
                          view.lag_s)
        yield from _gauge("dblog_lag_bytes", "bytes of log between the source's head and the "
                          "committed position", view.lag_bytes)
        yield from _gauge("dblog_committed_seq", "last committed sequence number",
                          view.committed_seq)
        yield from _gauge("dblog_emitted_seq", "last emitted sequence number", view.emitted_seq)
        yield from _engine_metrics(status)
        yield from _dump_metrics(view.dumps)
        tables = GaugeMetricFamily("dblog_table_state", "1 for each table's current state",
                                   labels=["table", "state"])
        for table, state in sorted(view.tables.items()):
            tables.add_metric([table, state], 1)
        yield tables


def _engine_metrics(status: dict[str, Any]) -> Iterator[Metric]:
    metrics = status.get("metrics") or {}
    events = CounterMetricFamily("dblog_events", "events emitted, by operation and table",
                                 labels=["op", "table"])
    for row in metrics.get("events", []):
        events.add_metric([row["op"], row["table"] or ""], row["count"])
    yield events
    calls = CounterMetricFamily("dblog_output_calls", "calls to outputs",
                                labels=["output", "call"])
    seconds = CounterMetricFamily("dblog_output_seconds", "time spent in output calls "
                                  "(latency: rate of this over rate of calls)",
                                  labels=["output", "call"])
    failures = CounterMetricFamily("dblog_output_errors", "output calls that failed "
                                   "(each retried or fatal)", labels=["output", "call"])
    for row in metrics.get("outputs", []):
        labels = [row["output"], row["action"]]
        calls.add_metric(labels, row["calls"])
        seconds.add_metric(labels, row["seconds"])
        failures.add_metric(labels, row["failures"])
    yield from (calls, seconds, failures)
    discards = CounterMetricFamily("dblog_chunks_discarded", "chunks given up and read again, "
                                   "by table and reason", labels=["table", "reason"])
    for row in metrics.get("discards", []):
        discards.add_metric([row["table"], row["reason"]], row["count"])
    yield discards
    if "restarts" in status:
        yield CounterMetricFamily("dblog_engine_restarts", "restarts after transient failures",
                                  value=status["restarts"])
    queues = GaugeMetricFamily("dblog_queue_depth", "items waiting in the engine's queues",
                               labels=["queue"])
    for name, depth in sorted((status.get("queues") or {}).items()):
        queues.add_metric([name], depth)
    yield queues


def _dump_metrics(dumps: list[Any]) -> Iterator[Metric]:
    rows = GaugeMetricFamily("dblog_dump_rows", "rows a dump emitted", labels=["dump", "state"])
    total = GaugeMetricFamily("dblog_dump_estimated_rows", "rows a dump is expected to emit",
                              labels=["dump"])
    chunks = GaugeMetricFamily("dblog_dump_chunks", "chunks a dump completed", labels=["dump"])
    active = GaugeMetricFamily("dblog_dumps", "dumps by state", labels=["state"])
    by_state: dict[str, int] = {}
    for dump in dumps:
        rows.add_metric([dump.id, dump.state], dump.rows)
        total.add_metric([dump.id], dump.estimated_total)
        chunks.add_metric([dump.id], dump.chunks)
        by_state[dump.state] = by_state.get(dump.state, 0) + 1
    for state, count in sorted(by_state.items()):
        active.add_metric([state], count)
    yield from (rows, total, chunks, active)


def exposition(service: Service) -> Callable[[], tuple[bytes, str]]:
    """A function giving the current exposition text and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(service))
    return lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)
