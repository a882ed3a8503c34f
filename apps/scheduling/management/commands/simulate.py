"""python manage.py simulate --nodes NODES.csv --pods PODS.csv --policy NAME[,NAME…] [--seeds 42-51] [--json OUT]

Replays a GPU-sharing trace (Alibaba openb CSV format) through the scheduling engine; no database is
used. The logic lives in ``apps.scheduling.engine.trace_replay`` so it can run without Django as well.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.scheduling.engine import trace_replay


class _Plain:
    """``print(..., file=...)`` writes its own newlines; Django's OutputWrapper would add more."""

    def __init__(self, wrapper) -> None:
        self._wrapper = wrapper

    def write(self, text: str) -> None:
        self._wrapper.write(text, ending="")

    def flush(self) -> None:
        self._wrapper.flush()


class Command(BaseCommand):
    help = "Run the trace benchmark (unallocated GPU % at 100 % arrived, allocation curve) for policies."

    def add_arguments(self, parser):
        trace_replay.add_arguments(parser)

    def handle(self, *args, **options):
        namespace = type("Args", (), {})()
        for key in ("nodes", "pods", "policy", "seeds", "json_out", "ratio", "jobs", "quiet", "tie_break"):
            setattr(namespace, key, options[key])
        try:
            code = trace_replay.execute(namespace, _Plain(self.stdout))
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if code:
            raise CommandError(f"simulate failed (exit code {code})")
