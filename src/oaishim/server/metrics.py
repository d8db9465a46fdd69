"""The gateway's own Prometheus metrics, served at ``GET /metrics`` (the backend's stay the backend's).

Names follow the OpenTelemetry GenAI semantic conventions (gen-ai-metrics.md), mapped to Prometheus
naming (dots to underscores, the unit as a suffix where Prometheus wants one), with the buckets
the conventions give; oaishim's own are prefixed ``oaishim_``. Labels are bounded: the model is the
configured route's name (``*`` for a wildcard route), never what a client sent; the profile is a
known profile's name; the endpoint one of the gateway's own.

Everything is observed once, when a request ends (:meth:`Metrics.observe`), from its
:class:`~oaishim.server.exchange.Exchange`; the label children of a label combination are looked
up once and kept, so a request costs a dict lookup and a few ``observe`` calls, and a streamed
chunk costs nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from oaishim.server.exchange import Exchange, StreamCount
from oaishim.server.idle_poll import POLL

__all__ = ["CONTENT_TYPE", "Metrics", "StreamCount"]

CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()
# ExplicitBucketBoundaries of the GenAI conventions
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
# the gateway's own time is small: from 50 µs to a second
ADDED_BUCKETS: Final = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# gen_ai.operation.name for each generating endpoint (the Responses API generates a chat turn)
OPERATIONS: Final = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings", "responses": "chat"}
GEN_AI: Final = ("gen_ai_operation_name", "gen_ai_request_model", "endpoint", "status_class", "profile")


class _Series:
    """One histogram series: a count per bucket and the sum, plain numbers (the event loop is the
    only writer, and a scrape runs in it too: no lock, unlike prometheus_client's Histogram)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        bounds = self.bounds
        low, high = 0, len(bounds)
        while low < high:  # bisect_left's search, compiled: no call into the C module, floats unboxed
            mid = (low + high) // 2
            if bounds[mid] < value:
                low = mid + 1
            else:
                high = mid
        self.counts[low] += 1
        self.sum += value


# a status's class, by its first digit (no formatting a request)
_CLASSES: Final = ("none", *(f"{n}xx" for n in range(1, 10)))


class _Histogram(Collector):
    """A labelled histogram whose ``observe`` is a bisect and two additions (a request observes a
    handful; prometheus_client's takes a lock per bucket and series)."""

    def __init__(
        self, registry: CollectorRegistry, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.bounds = tuple(float(b) for b in bounds)
        self.series: dict[tuple[str, ...], _Series] = {}
        registry.register(self)

    def labels(self, *values: str) -> _Series:
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = _Series(self.bounds)
        return series

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, series in list(self.series.items()):
            running, buckets = 0, []
            for bound, count in zip((*self.bounds, float("inf")), series.counts, strict=True):
                running += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric(list(values), buckets, series.sum)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)


class _Counter(Collector):
    """A labelled counter kept as a dict of plain numbers (prometheus_client's child ``inc`` is four
    Python calls and a lock); exposed as ``<name>_total``."""

    def __init__(self, registry: CollectorRegistry, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.labelnames = name, doc, tuple(labels)
        self.counts: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.counts[labels] = self.counts.get(labels, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, count in list(self.counts.items()):
            family.add_metric(list(values), count)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.doc, labels=self.labelnames)


class _CaptureDrops(Collector):
    def __init__(self, dropped: object) -> None:
        self._source = dropped  # the capture writer (its ``dropped``), or None without --capture

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "oaishim_capture_dropped", "Exchanges the capture queue had no room for (not recorded)."
        )
        family.add_metric([], float(getattr(self._source, "dropped", 0)))
        yield family


class _IdlePoll(Collector):
    """What ``serve --idle-poll-us`` did in this process (server.idle_poll): 0 and 0 when it is off."""

    def collect(self) -> Iterator[Metric]:
        turns = CounterMetricFamily(
            "oaishim_idle_poll_turns", "Event loop turns spent polling after a read instead of sleeping."
        )
        turns.add_metric([], float(POLL.turns))
        yield turns
        taken = CounterMetricFamily(
            "oaishim_idle_poll_given_up",
            "Polls given up because the CPU went to something else meanwhile (another process or thread, the host).",
        )
        taken.add_metric([], float(POLL.taken))
        yield taken


class Metrics:
    def __init__(self, streams: StreamCount, capture: object = None) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.duration = _Histogram(
            registry,
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration: the whole request as the gateway's client saw it.",
            GEN_AI,
            DURATION_BUCKETS,
        )
        self.tokens = _Histogram(
            registry,
            "gen_ai_client_token_usage",
            "Number of input and output tokens used (from the backend's usage, when it sent one).",
            ("gen_ai_operation_name", "gen_ai_request_model", "gen_ai_token_type", "profile"),
            TOKEN_BUCKETS,
        )
        self.ttft = _Histogram(
            registry,
            "gen_ai_server_time_to_first_token_seconds",
            "Time to the first streamed event sent to the client, for successful streams.",
            ("gen_ai_operation_name", "gen_ai_request_model", "profile"),
            TTFT_BUCKETS,
        )
        self.tpot = _Histogram(
            registry,
            "gen_ai_server_time_per_output_token_seconds",
            "Time per output token after the first, for successful streams with a usage.",
            ("gen_ai_operation_name", "gen_ai_request_model", "profile"),
            TPOT_BUCKETS,
        )
        self.added = _Histogram(
            registry,
            "oaishim_added_seconds",
            "Time the gateway itself spent on a request: before the upstream request, and rewriting the answer.",
            ("endpoint", "gen_ai_request_model"),
            ADDED_BUCKETS,
        )
        self.requests = _Counter(
            registry,
            "oaishim_requests",
            "Requests answered, by endpoint and status class.",
            ("endpoint", "status_class"),
        )
        self.repairs = _Counter(registry, "oaishim_repairs", "Requests that needed a repair, by kind.", ("kind",))
        self.direct = _Counter(
            registry,
            "oaishim_stream_direct_reads",
            "Upstream reads of streams written to the client as they came in (taken), or handed back to "
            "the relay because the client was not reading (declined).",
            ("outcome",),
        )
        self.format_violations = Counter(
            "oaishim_response_format_violations",
            "Choices whose final answer broke the response_format asked for (not JSON, not an object, "
            "or rejected by the schema), by model.",
            ("gen_ai_request_model",),
            registry=registry,
        )
        self.upstream_errors = Counter(
            "oaishim_upstream_errors", "Requests the backend failed, by cause.", ("cause",), registry=registry
        )
        self.disconnects = Counter(
            "oaishim_client_disconnects", "Clients that went away before their answer ended.", registry=registry
        )
        self.key_requests = Counter(
            "oaishim_key_requests", "Requests by virtual key label and status class.", ("key", "status_class"),
            registry=registry,
        )  # fmt: skip
        self.rate_limited = Counter(
            "oaishim_rate_limited", "Requests refused with 429 by a key's limits, by key label and limit.",
            ("key", "limit"), registry=registry,
        )  # fmt: skip
        open_streams = Gauge("oaishim_open_streams", "Streams being relayed now.", registry=registry)
        open_streams.set_function(lambda: float(streams.n))
        registry.register(_CaptureDrops(capture))
        registry.register(_IdlePoll())
        self._gen_ai: dict[tuple[str, ...], tuple[_Series, ...]] = {}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _children(self, key: tuple[str, ...]) -> tuple[_Series, ...]:
        """The series of one label combination, looked up once and kept."""
        operation, model, endpoint, _status, profile = key
        children = (
            self.duration.labels(*key),
            self.tokens.labels(operation, model, "input", profile),
            self.tokens.labels(operation, model, "output", profile),
            self.ttft.labels(operation, model, profile),
            self.tpot.labels(operation, model, profile),
            self.added.labels(endpoint, model),
        )
        self._gen_ai[key] = children
        return children

    def observe(self, ex: Exchange, ended: float) -> None:
        """One finished request."""
        status = _CLASSES[ex.status // 100] if 0 < ex.status < 1000 else "none"
        self.requests.inc((ex.endpoint, status))
        if ex.key_label is not None:
            self.key_requests.labels(ex.key_label, status).inc()
        for kind in ex.repairs:
            self.repairs.inc((kind,))
        if ex.format_violations:
            self.format_violations.labels(ex.model or "unknown").inc(ex.format_violations)
        if ex.upstream_fault is not None:
            self.upstream_errors.labels(ex.upstream_fault).inc()
        if ex.gone:
            self.disconnects.inc()
        if ex.direct_taken:
            self.direct.inc(("taken",), ex.direct_taken)
        if ex.direct_declined:
            self.direct.inc(("declined",), ex.direct_declined)
        operation = OPERATIONS.get(ex.endpoint)
        if operation is None or ex.model is None:
            return  # not a generation, or refused before a model was known
        key = (operation, ex.model, ex.endpoint, status, ex.profile or "unknown")
        children = self._gen_ai.get(key) or self._children(key)
        duration, tokens_in, tokens_out, ttft, tpot, added = children
        elapsed = ended - ex.started
        duration.observe(elapsed)
        added.observe(ex.added)
        if ex.tokens_in is not None:
            tokens_in.observe(ex.tokens_in)
        if ex.tokens_out is not None:
            tokens_out.observe(ex.tokens_out)
        if ex.stream and ex.status == 200 and ex.first_token is not None and not ex.gone and ex.upstream_fault is None:
            first = ex.first_token - ex.started
            ttft.observe(first)
            if ex.tokens_out is not None and ex.tokens_out > 1:
                tpot.observe((elapsed - first) / (ex.tokens_out - 1))
