"""Staff edit a project's guaranteed CU and borrowing limit on /quotas/ (issue 21): through the quota
service (audited, department bound), a precise 400 for bad values with nothing written, 403 for members."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.core.models import ChangeRecord
from apps.quotas.models import Quota
from tests.fixtures.quotas import quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(make_user, two_projects):
    staff = make_user("ops", staff=True)
    user, vision, nlp = two_projects
    q = quota(staff, project=vision, guaranteed_cu=4, borrowing_limit_cu=2)
    return {"staff": staff, "member": user, "quota": q, "research": vision.department}


def _edit(client, q, guaranteed, limit):
    return client.post(
        reverse("quotas:edit", args=[q.pk]), {"guaranteed_cu": guaranteed, "borrowing_limit_cu": limit}
    )


def test_staff_see_the_edit_form_labelled_staff_only_and_members_do_not(client, setup):
    client.force_login(setup["staff"])
    html = client.get(reverse("quotas:overview")).content.decode()
    assert f'data-quota-edit="{setup["quota"].pk}"' in html and "platform staff only" in html
    client.force_login(setup["member"])
    html = client.get(reverse("quotas:overview")).content.decode()
    assert "data-quota-edit" not in html


def test_staff_change_guarantee_and_limit_audited(client, setup):
    client.force_login(setup["staff"])
    response = _edit(client, setup["quota"], "6.5", "")
    assert response.status_code == 302
    q = Quota.objects.get(pk=setup["quota"].pk)
    assert q.guaranteed_cu == Decimal("6.5") and q.borrowing_limit_cu is None  # blank: unlimited
    assert ChangeRecord.objects.filter(action="quota.update").exists()
    assert _edit(client, q, "6.5", "0").status_code == 302
    assert Quota.objects.get(pk=q.pk).borrowing_limit_cu == Decimal(0)


@pytest.mark.parametrize(
    ("guaranteed", "limit", "reason"),
    [
        ("abc", "1", "is not a number of compute units"),
        ("-1", "1", "between 0 and"),
        ("4", "-2", "between 0 and"),
        ("1.123456", "1", "at most 4 decimal places"),
        ("", "1", "Enter a number of compute units"),
        ("NaN", "1", "is not a number"),
    ],
)
def test_bad_values_are_a_400_with_the_reason_and_nothing_written(client, setup, guaranteed, limit, reason):
    client.force_login(setup["staff"])
    response = _edit(client, setup["quota"], guaranteed, limit)
    assert response.status_code == 400
    assert reason in response.content.decode()
    q = Quota.objects.get(pk=setup["quota"].pk)
    assert (q.guaranteed_cu, q.borrowing_limit_cu) == (Decimal(4), Decimal(2))


def test_the_department_bound_is_a_400_with_the_service_reason(client, setup):
    quota(setup["staff"], department=setup["research"], guaranteed_cu=5)
    client.force_login(setup["staff"])
    response = _edit(client, setup["quota"], "9", "1")
    assert response.status_code == 400
    assert "more than the department" in response.content.decode()
    assert Quota.objects.get(pk=setup["quota"].pk).guaranteed_cu == Decimal(4)


def test_a_member_post_is_a_403(client, setup):
    client.force_login(setup["member"])
    assert _edit(client, setup["quota"], "100", "").status_code == 403
    assert Quota.objects.get(pk=setup["quota"].pk).guaranteed_cu == Decimal(4)
