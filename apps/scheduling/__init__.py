"""Scheduling: the pure placement engine (``apps.scheduling.engine``) and, later, its services."""
