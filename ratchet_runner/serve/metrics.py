"""Metrics in the Prometheus exposition format, for ``GET /metrics`` of ``ratchet serve`` and for
``ratchet worker --metrics-port``.

Two kinds of series, none labelled by run:

- **About the runs**, read from the store at scrape time (:meth:`Store.stats
  <ratchet_runner.store.store.Store.stats>`), so they are right whichever process moved the runs:
  runs by workflow and status, run age, time in the current state, attempts and retries, the
  reconcile backlog, decisions waiting and how long, failed compensations, stuck runs. A store
  that does not answer gives ``ratchet_store_up 0`` and none of them.
- **About this process**, which only it knows: effect call latency (every call it made to a
  provider, :mod:`~ratchet_runner.engine.observe`) and, in the service, webhooks by outcome.

``docs/reference/metrics.md`` explains each series and gives alert rules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..errors import RatchetError, UsageError
from ..review.views import age_buckets, watch_calls

if TYPE_CHECKING:
    from ..engine.runner import Runner
    from ..review.views import Stats
    from ..session import Session

#: The content type of the exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Call latency buckets, in seconds (5 ms to a minute).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class StoreCollector(Collector):
    """The series about the runs, read from the store at each scrape. ``runner`` (made on first
    use by ``runner``) reads the specs, to tell which waiting states wait for a decision."""

    def __init__(self, runner: Callable[[], Runner], stuck_after: float = 300.0) -> None:
        self._runner = runner
        self.stuck_after = stuck_after
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ratchet_store_up", "Whether the store answered this scrape.")
        with self._lock:  # one scrape at a time reads the store
            try:
                runner = self._runner()
                stats = runner.store.stats(runner.clock.now(), self.stuck_after)
            except RatchetError:
                up.add_metric([], 0)
                yield up
                return
            up.add_metric([], 1)
            yield up
            yield from _run_series(stats)
            yield from _decision_series(stats, runner)


def _run_series(stats: Stats) -> Iterator[Metric]:
    yield _gauge("ratchet_runs", "Runs by workflow and status.", ["workflow", "status"], stats.runs)
    age = HistogramMetricFamily(
        "ratchet_run_age_seconds",
        "Age of the runs not ended (since they were created), by workflow.",
        labels=["workflow"],
    )
    for workflow, (count, total, under) in sorted(stats.ages.items()):
        buckets = [(_le(bound), n) for bound, n in zip(age_buckets(), under, strict=True)]
        age.add_metric([workflow], [*buckets, ("+Inf", count)], total)
    yield age
    yield from _count_and_longest(
        ("ratchet_runs_in_state", "Runs not ended, by their current state."),
        (
            "ratchet_state_age_max_seconds",
            "The longest time a run not ended has been in its current state.",
        ),
        ["workflow", "state"],
        stats.states,
    )
    attempts = CounterMetricFamily(
        "ratchet_effect_attempts",
        "Calls made for effects (attempts recorded), by workflow, effect and role.",
        labels=["workflow", "effect", "role"],
    )
    retries = CounterMetricFamily(
        "ratchet_effect_retries",
        "Attempts beyond each operation's first, by workflow, effect and role.",
        labels=["workflow", "effect", "role"],
    )
    for (workflow, effect, role), (operations, made) in sorted(stats.attempts.items()):
        attempts.add_metric([workflow, effect, role], made)
        retries.add_metric([workflow, effect, role], max(0, made - operations))
    yield attempts
    yield retries
    yield _gauge(
        "ratchet_reconcile_backlog",
        "Operations whose outcome is unknown: a reconcile (lookup) is owed.",
        ["workflow", "effect"],
        stats.unknown,
    )
    yield _gauge(
        "ratchet_compensation_failures",
        "Compensations that failed for good (refused, or out of attempts): a person is needed.",
        ["workflow", "effect"],
        stats.failed_undos,
    )
    found = CounterMetricFamily(
        "ratchet_duplicates_detected",
        "Times a lookup found an operation's change made more than once (a provider that does "
        "not deduplicate committed a request late): each run waits for a person.",
        labels=["workflow", "effect"],
    )
    for (workflow, effect), count in sorted(stats.duplicates.items()):
        found.add_metric([workflow, effect], count)
    yield found
    yield _gauge(
        "ratchet_stuck_runs",
        "Runs nobody is moving: a lease expired, or runnable and unmoved for 300 s.",
        ["workflow", "reason"],
        stats.stuck,
    )


def _decision_series(stats: Stats, runner: Runner) -> Iterator[Metric]:
    found: dict[tuple[str, str], tuple[int, float]] = {}
    for (workflow, digest, state), (count, longest) in stats.waiting.items():
        try:
            spec = runner.spec_for_digest(digest)
        except RatchetError:
            continue
        kind = spec.states.get(state)
        if kind is None or kind.approval is None:
            continue
        key = (workflow, kind.approval)
        before = found.get(key, (0, 0.0))
        found[key] = (before[0] + count, max(before[1], longest))
    yield from _count_and_longest(
        (
            "ratchet_decisions_waiting",
            "Runs waiting for a person's decision, by workflow and approval.",
        ),
        (
            "ratchet_decision_wait_max_seconds",
            "The longest a run has waited for a decision, by workflow and approval.",
        ),
        ["workflow", "approval"],
        found,
    )


def _gauge(
    name: str, documentation: str, labels: list[str], counts: Mapping[tuple[str, str], int]
) -> Metric:
    """A gauge with one sample per key of ``counts`` (the key's parts are the labels)."""
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for key, count in sorted(counts.items()):
        family.add_metric(list(key), count)
    return family


def _count_and_longest(
    count: tuple[str, str],
    longest: tuple[str, str],
    labels: list[str],
    found: Mapping[tuple[str, str], tuple[int, float]],
) -> Iterator[Metric]:
    """Two gauges per key of ``found``: how many, and the longest any has waited (``count``
    and ``longest`` are each a name and its documentation)."""
    how_many = GaugeMetricFamily(*count, labels=labels)
    oldest = GaugeMetricFamily(*longest, labels=labels)
    for key, (number, seconds) in sorted(found.items()):
        how_many.add_metric(list(key), number)
        oldest.add_metric(list(key), seconds)
    yield how_many
    yield oldest


def _le(bound: float) -> str:
    """A bucket's bound as the client library writes its own (``60.0``)."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]


class WebhookCollector(Collector):
    """The service's webhooks by outcome (``delivered``, ``duplicate``, ``ignored``,
    ``refused``) and, for refusals, reason."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "ratchet_webhooks",
            "Webhooks received, by outcome and (refused ones) reason.",
            labels=["outcome", "reason"],
        )
        for outcome in ("delivered", "duplicate", "ignored"):
            family.add_metric([outcome, ""], self._counts().get(outcome, 0))
        for key, count in sorted(self._counts().items()):
            if key.startswith("refused:"):
                family.add_metric(["refused", key.removeprefix("refused:")], count)
        yield family
        denied = CounterMetricFamily(
            "ratchet_console_refusals",
            "Console requests refused before anything was asked of the library, by reason.",
            labels=["reason"],
        )
        for reason in ("sign_in", "no_session", "csrf"):
            denied.add_metric([reason], self._counts().get(f"denied:{reason}", 0))
        yield denied


class Metrics:
    """A registry with the store's series, this process's call latency, and (in the service)
    its webhooks. :meth:`close` stops watching calls."""

    def __init__(
        self,
        runner: Callable[[], Runner],
        webhook_counts: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(StoreCollector(runner))
        self.calls = Histogram(
            "ratchet_effect_call_seconds",
            "How long each call to a provider took in this process, by effect and outcome.",
            ["workflow", "effect", "outcome"],
            buckets=CALL_BUCKETS,
            registry=self.registry,
        )
        if webhook_counts is not None:
            self.registry.register(WebhookCollector(webhook_counts))
        self._stop = watch_calls(self._observe)

    def _observe(self, workflow: str, effect: str, outcome: str, seconds: float) -> None:
        self.calls.labels(workflow, effect, outcome).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        self._stop()


class Exporter:
    """Metrics served over HTTP by a thread of their own (``ratchet worker --metrics-port``)."""

    def __init__(self, metrics: Metrics, server: Any, thread: threading.Thread) -> None:
        self.metrics, self._server, self._thread = metrics, server, thread
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self.metrics.close()


def serve_metrics(session: Session, host: str, port: int) -> Exporter:
    """Serve ``session``'s metrics on ``host:port`` (0: a free port); a usage error when the
    port cannot be had. One runner of the session reads the store, a scrape at a time."""
    from prometheus_client import start_http_server

    made: list[Runner] = []

    def runner() -> Runner:
        if not made:
            made.append(session.runner())
        return made[0]

    metrics = Metrics(runner)
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        metrics.close()
        raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    return Exporter(metrics, server, thread)
