"""Rollout writes: soak criteria, gray-release batches through their stages, benchmark runs, upgrade
plans and waves, autoscaling policies and their decisions — one module each.

* ``batches`` — a gray batch from planned through soak to admitted, failed or rolled back (the stage
  diagram and its rules are in that module's doc);
* ``stages`` — what every batch write shares: the diagram's actions, the locked stage move, the gray
  label and taint on nodes;
* ``criteria`` — soak criteria; ``benchmark_runs`` — measured runs; ``plans`` — upgrade plans and waves;
* ``autoscaling`` — autoscaling policies and their evaluation;
* ``texts`` — the stored texts these writes leave for people to read later.

Other apps and the tests import the names below from ``apps.rollout.services``.
"""

from apps.rollout.services.autoscaling import (
    POLICY_FIELDS,
    autoscale_evaluate,
    autoscale_policy_create,
    autoscale_policy_delete,
    autoscale_policy_update,
    autoscale_run,
)
from apps.rollout.services.batches import (
    BATCH_FIELDS,
    batch_admit,
    batch_create,
    batch_delete,
    batch_evaluate,
    batch_fail,
    batch_node_release,
    batch_rollback,
    batch_soak_start,
    batch_update,
    batches_evaluate,
    failure_reason_prefix,
    quarantine_hold,
)
from apps.rollout.services.benchmark_runs import RUN_FIELDS, benchmark_run_record
from apps.rollout.services.criteria import (
    CRITERIA_FIELDS,
    soak_criteria_create,
    soak_criteria_delete,
    soak_criteria_update,
)
from apps.rollout.services.plans import upgrade_plan_create, upgrade_wave_create, upgrade_wave_start
from apps.rollout.services.stages import (
    BATCH_ACTIONS,
    GRAY_KEY,
    GRAY_TAINT,
    Stage,
    batch_actions,
    node_gray_clear,
    node_gray_mark,
)

__all__ = [
    "BATCH_ACTIONS",
    "BATCH_FIELDS",
    "CRITERIA_FIELDS",
    "GRAY_KEY",
    "GRAY_TAINT",
    "POLICY_FIELDS",
    "RUN_FIELDS",
    "Stage",
    "autoscale_evaluate",
    "autoscale_policy_create",
    "autoscale_policy_delete",
    "autoscale_policy_update",
    "autoscale_run",
    "batch_actions",
    "batch_admit",
    "batch_create",
    "batch_delete",
    "batch_evaluate",
    "batch_fail",
    "batch_node_release",
    "batch_rollback",
    "batch_soak_start",
    "batch_update",
    "batches_evaluate",
    "benchmark_run_record",
    "failure_reason_prefix",
    "node_gray_clear",
    "node_gray_mark",
    "quarantine_hold",
    "soak_criteria_create",
    "soak_criteria_delete",
    "soak_criteria_update",
    "upgrade_plan_create",
    "upgrade_wave_create",
    "upgrade_wave_start",
]
