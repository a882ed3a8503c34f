"""Per-cluster loop health: how the periodic reconcile and push last went for each cluster.

Each cluster's reconcile and push run in a task of their own (``worker.tasks.reconcile`` /
``worker.tasks.push`` fan out one task per cluster per period), so a cluster whose API server hangs
holds up its own task only, for at most the client timeout. Each run ends here:

* ``loop_succeeded``: the failure count goes back to 0, the time of the success is kept;
* ``loop_failed``: the error, the time, one more consecutive failure and the earliest next try
  (exponential backoff with jitter, ``BACKOFF_BASE_S`` doubling up to ``BACKOFF_CAP_S``); the fan-out
  skips a cluster until its next try is due (``clusters_in_backoff``), so a cluster that is down
  costs one bounded timeout per backoff period instead of one per period;
* ``cluster_health``: what the cluster pages show (reachable or not, since when, the last error).

A change between reachable and unreachable is audited (``core.ChangeRecord`` on the cluster) and
logged as one warning line for the cluster (no traceback; the first of its loops to fail, the last to
recover); the runs in between are not (one row per cluster and loop is updated in place).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.clusters.backends.errors import BackendError, TransientBackendError
from apps.clusters.models import ClusterLoop
from apps.core.audit import change_record_create
from apps.core.validation import validate_and_save
from apps.inventory.models import Cluster

logger = logging.getLogger(__name__)

# The first failure waits 10-20 s (about one or two 10 s periods), then 2x each time, up to 5 min.
BACKOFF_BASE_S = 20.0
BACKOFF_CAP_S = 300.0


def no_answer(error: BaseException) -> bool:
    """The cluster gave no HTTP answer at all: timed out, refused, reset (a TransientBackendError
    without a status, ``KubernetesBackend._call``). Later calls to it would wait the same way."""
    return isinstance(error, TransientBackendError) and not error.status


def cluster_unreachable(error: BaseException) -> bool:
    """The error says the cluster (its API server) is down, not that one object was refused: no
    answer, 5xx, or 429 Too Many Requests (the API server shedding load: API Priority and Fairness,
    https://kubernetes.io/docs/concepts/cluster-administration/flow-control/)."""
    if not isinstance(error, TransientBackendError):
        return False
    return not error.status or error.status >= 500 or error.status == 429


def backoff_seconds(failures: int) -> float:
    """Exponential backoff with "equal jitter": half the capped delay, plus up to the other half."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2 ** max(0, failures - 1)))
    return delay / 2 + random.uniform(0, delay / 2)  # noqa: S311 - jitter, not cryptography


def clusters_in_backoff(*, loop: str, now: dt.datetime | None = None) -> set[int]:
    """Clusters whose ``loop`` failed and whose next try is not due yet."""
    now = now or timezone.now()
    return set(
        ClusterLoop.objects.filter(loop=loop, next_attempt_at__gt=now).values_list("cluster_id", flat=True)
    )


def clusters_backing_off(*, now: dt.datetime | None = None) -> dict[int, str]:
    """Clusters any of whose loops failed and is not due again yet → the last error: while so, the
    cluster counts as unreachable and its pushes are held (``apps.clusters.pusher``)."""
    now = now or timezone.now()
    out: dict[int, str] = {}
    rows = ClusterLoop.objects.filter(next_attempt_at__gt=now).order_by("-last_failure_at", "pk")
    for cluster_id, error in rows.values_list("cluster_id", "last_error"):
        out.setdefault(cluster_id, error)
    return out


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _others_failing(row: ClusterLoop) -> bool:
    return (
        ClusterLoop.objects.filter(cluster_id=row.cluster_id, consecutive_failures__gt=0)
        .exclude(pk=row.pk)
        .exists()
    )


def sync_outcome_log(cluster: Cluster, *, previous: dict, error: str) -> None:
    """One warning line when a cluster's sync starts failing or works again (``previous``: its last
    ``last_sync``), none for the passes in between, and none while its loops already said it is
    unreachable (``loop_failed``)."""
    was_failing = bool((previous or {}).get("error"))
    if bool(error) == was_failing:
        return
    if ClusterLoop.objects.filter(cluster_id=cluster.pk, consecutive_failures__gt=0).exists():
        return
    if error:
        logger.warning("cluster %s: sync fails: %s", cluster.slug, _one_line(error))
    else:
        logger.warning("cluster %s: sync works again", cluster.slug)


def _row(cluster: Cluster, loop: str) -> ClusterLoop:
    row, _ = ClusterLoop.objects.get_or_create(cluster=cluster, loop=loop)
    return ClusterLoop.objects.select_for_update().get(pk=row.pk)


def loop_succeeded(
    *, cluster: Cluster, loop: str, started_at: dt.datetime, actor: Any, now: dt.datetime | None = None
) -> ClusterLoop:
    now = now or timezone.now()
    with transaction.atomic():
        row = _row(cluster, loop)
        was_failing = row.consecutive_failures > 0
        failures = row.consecutive_failures
        row.last_started_at = started_at
        row.last_success_at = now
        row.consecutive_failures = 0
        row.next_attempt_at = None
        row.last_duration_ms = max(0, int((now - started_at).total_seconds() * 1000))
        validate_and_save(row, what=f"cluster loop {loop}")
        if was_failing and not _others_failing(row):
            logger.warning(
                "cluster %s is reachable again (%s after %d failed pass(es))", cluster.slug, loop, failures
            )
        if was_failing:
            change_record_create(
                actor=actor,
                action="cluster_reachable",
                obj=cluster,
                before={"loop": loop, "consecutive_failures": failures, "last_error": row.last_error[:500]},
                after={"loop": loop, "consecutive_failures": 0},
            )
    return row


def loop_failed(
    *,
    cluster: Cluster,
    loop: str,
    error: str,
    started_at: dt.datetime,
    actor: Any,
    now: dt.datetime | None = None,
) -> ClusterLoop:
    now = now or timezone.now()
    with transaction.atomic():
        row = _row(cluster, loop)
        row.last_started_at = started_at
        row.last_failure_at = now
        row.last_error = error[:2000]
        row.consecutive_failures += 1
        row.next_attempt_at = now + dt.timedelta(seconds=backoff_seconds(row.consecutive_failures))
        row.last_duration_ms = max(0, int((now - started_at).total_seconds() * 1000))
        validate_and_save(row, what=f"cluster loop {loop}")
        if row.consecutive_failures == 1 and not _others_failing(row):
            logger.warning(
                "cluster %s is unreachable (%s): %s; retried with backoff, its pushes are held",
                cluster.slug,
                loop,
                _one_line(error),
            )
        if row.consecutive_failures == 1:
            change_record_create(
                actor=actor,
                action="cluster_unreachable",
                obj=cluster,
                before={"loop": loop, "consecutive_failures": 0},
                after={"loop": loop, "consecutive_failures": 1, "last_error": error[:500]},
            )
    return row


def loop_record(
    *,
    cluster: Cluster,
    loop: str,
    error: BackendError | str | None,
    started_at: dt.datetime,
    actor: Any,
    now: dt.datetime | None = None,
) -> ClusterLoop:
    """Record one run: a failure when ``error`` is given, else a success."""
    if error:
        message = error.message if isinstance(error, BackendError) else str(error)
        return loop_failed(
            cluster=cluster, loop=loop, error=message, started_at=started_at, actor=actor, now=now
        )
    return loop_succeeded(cluster=cluster, loop=loop, started_at=started_at, actor=actor, now=now)


@dataclass
class ClusterHealth:
    """What the cluster pages show for one cluster."""

    unreachable: bool = False
    failures: int = 0
    last_success_at: dt.datetime | None = None
    last_failure_at: dt.datetime | None = None
    last_error: str = ""
    next_attempt_at: dt.datetime | None = None
    loops: tuple[str, ...] = ()  # the failing loops


def cluster_health(cluster_ids) -> dict[int, ClusterHealth]:
    """Per cluster id: unreachable when any of its loops failed its last run. The time of the last
    success is the oldest last success of its failing loops (None: it never succeeded)."""
    rows: dict[int, list[ClusterLoop]] = {}
    for row in ClusterLoop.objects.filter(cluster_id__in=list(cluster_ids)).order_by("cluster_id", "loop"):
        rows.setdefault(row.cluster_id, []).append(row)
    out: dict[int, ClusterHealth] = {}
    for cluster_id, loops in rows.items():
        failing = [r for r in loops if r.consecutive_failures]
        if not failing:
            out[cluster_id] = ClusterHealth(
                last_success_at=max((r.last_success_at for r in loops if r.last_success_at), default=None)
            )
            continue
        latest = max(failing, key=lambda r: r.last_failure_at or timezone.now())
        successes = [r.last_success_at for r in failing]
        out[cluster_id] = ClusterHealth(
            unreachable=True,
            failures=max(r.consecutive_failures for r in failing),
            last_success_at=None if None in successes else min(successes),
            last_failure_at=latest.last_failure_at,
            last_error=latest.last_error,
            next_attempt_at=max((r.next_attempt_at for r in failing if r.next_attempt_at), default=None),
            loops=tuple(r.loop for r in failing),
        )
    return out
