"""The demo: seed data for every app and the one-command local runner (``load_demo``, ``serve``).

It sits above every domain app (tests/core/test_layers.py), so no domain app depends on its demo.
"""
