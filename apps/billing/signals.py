"""Signals billing sends to the layers above it."""

from django.dispatch import Signal

# Sent after draft bills were finalized (inside the closing transaction), with ``bill_ids``.
bills_finalized = Signal()
