"""Fixtures of the inventory tests: the cluster most of them register nodes in."""

from __future__ import annotations

import pytest

from apps.inventory.models import Cluster


@pytest.fixture
def cluster(db):
    """Cluster "prod" (a test that wants another cluster defines its own ``cluster``)."""
    return Cluster.objects.create(name="Prod", slug="prod")
