"""The migration API's refusals, through the shared contract (tests/api_contract.py)."""

from __future__ import annotations

import pytest

from apps.accounts.models import Membership
from apps.migration.models import MigratedService
from tests.api_contract import APIContract, Case, Endpoint

pytestmark = pytest.mark.django_db


class TestMigratedServices(APIContract):
    endpoint = Endpoint(
        list="/api/migration/services/",
        detail="/api/migration/services/{pk}/",
        member_writes=(("post", "/api/migration/services/{pk}/shift/", {}),),
        not_allowed=(("put", "/api/migration/services/{pk}/"), ("patch", "/api/migration/services/{pk}/")),
        json_write=("post", "/api/migration/services/"),
    )

    @pytest.fixture
    def case(self, dual, make_user, outsider, staff_user):
        service, user, project = dual
        viewer = make_user("vic")
        Membership.objects.create(user=viewer, project=project, role="viewer")
        return Case(
            pk=service.pk,
            member=user,
            outsider=outsider,
            staff=staff_user,
            viewer=viewer,
            member_sees=[service.pk],
            count=MigratedService.objects.count,
        )
