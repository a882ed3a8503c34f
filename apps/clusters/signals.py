"""What the pusher reports upward instead of calling into the apps above it (jobs' lifecycle lives in
scheduling, which sits above clusters).

``workload_push_failed``: a job's workload apply failed for good (a permanent error, or transient
errors ``max_attempts`` times). Sent with ``sender=PushAction`` and keyword arguments ``action`` (the
failed ``PushAction``, ``job_id`` and ``attempt`` set), ``reason`` (one line, ≤ 500 characters,
for the job's event) and ``actor``. It is sent inside the transaction that marks the action failed:
a receiver's writes commit with it, and a receiver that raises rolls the failure back (the action
stays pending and is retried). The scheduling app connects the receiver that returns the job to
pending (``apps.scheduling.handlers``).

``pods_listed``: a reconcile pass listed a cluster's pods (``apps.scheduling.reconcile``). Sent with
``sender=Cluster`` and keyword arguments ``cluster``, ``pods`` (the listed Pod dicts), ``now`` and
``actor``, outside any transaction, with ``send_robust``: a receiver's error is logged and never
stops the pass. The telemetry app reads back from it what device plugins wrote on the pods (Ascend's
``huawei.com/AscendReal``: ``apps.telemetry.plugin_readback``).
"""

from django.dispatch import Signal

workload_push_failed = Signal()
pods_listed = Signal()
