"""Celery tasks: thin wrappers that look rows up again and call one service."""

from worker.tasks.inventory import node_staleness_check_task

__all__ = ["node_staleness_check_task"]
