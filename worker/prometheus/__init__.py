"""Integration with Prometheus: the HTTP API client Suanchi's telemetry ingest drives."""
