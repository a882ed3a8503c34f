from django.apps import AppConfig


class BenchlibConfig(AppConfig):
    """The benchmark library (性能基准库): measured throughput of workload profiles on device models and
    compute templates, and recommendations by cost per unit of work."""

    name = "apps.benchlib"
    label = "benchlib"
    verbose_name = "Benchmark library"
