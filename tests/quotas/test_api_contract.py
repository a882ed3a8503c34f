"""The quota API's refusals, through the shared contract (tests/api_contract.py): staff write, members read
their projects' quotas, others see nothing."""

from __future__ import annotations

import pytest

from apps.quotas.models import Quota
from tests.api_contract import APIContract, Case, Endpoint
from tests.fixtures.quotas import quota

pytestmark = pytest.mark.django_db
URL = "/api/quotas/quotas/"
DETAIL = URL + "{pk}/"


class TestQuotas(APIContract):
    endpoint = Endpoint(
        list=URL,
        detail=DETAIL,
        staff_writes=(
            ("post", URL, {"project": "vision", "guaranteed_cu": "1"}),
            ("patch", DETAIL, {"borrowing_limit_cu": "3"}),
            ("delete", DETAIL, {}),
        ),
        not_allowed=(("post", DETAIL),),
        json_write=("post", URL),
    )

    @pytest.fixture
    def case(self, fleet, two_projects, outsider, staff_user):
        user, vision, _nlp = two_projects
        mine = quota(staff_user, project=vision, resource_class="any", guaranteed_cu=2)
        return Case(
            pk=mine.pk,
            member=user,
            outsider=outsider,
            staff=staff_user,
            member_sees=[mine.pk],
            count=Quota.objects.count,
        )
