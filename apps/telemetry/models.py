"""Models of the telemetry app."""
