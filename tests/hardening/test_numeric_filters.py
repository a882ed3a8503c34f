"""Issue 15, finding 5: an integer beyond 64 bits in a filter or a path was a 500 on SQLite (the demo's
database): ``OverflowError: Python int too large to convert to SQLite INTEGER``. Every FilterSet now
range-checks numbers and object ids before any query runs (apps/core/filters.py)."""

from __future__ import annotations

import importlib
import pkgutil

import django_filters
import pytest

import apps
from apps.core import filters as core_filters

HUGE = "99999999999999999999999"


def _all_filtersets() -> list[type]:
    for info in pkgutil.iter_modules(apps.__path__):
        try:
            importlib.import_module(f"apps.{info.name}.filtersets")
        except ModuleNotFoundError as exc:
            if exc.name != f"apps.{info.name}.filtersets":
                raise
    found, todo = [], list(django_filters.FilterSet.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("apps.") and cls.__module__.endswith(".filtersets"):
            found.append(cls)
    return found


def test_every_filterset_of_the_project_uses_the_range_checked_base():
    filtersets = _all_filtersets()
    assert len(filtersets) >= 20
    outside = [
        f"{c.__module__}.{c.__name__}" for c in filtersets if not issubclass(c, core_filters.FilterSet)
    ]
    assert not outside, f"FilterSets without the 64-bit range check: {outside}"


def _numeric_filters():
    for filterset in _all_filtersets():
        for name, filter_ in filterset.base_filters.items():
            if isinstance(filter_, django_filters.NumberFilter) or filter_.field_class in (
                core_filters.Int64ModelChoiceField,
                core_filters.Int64ModelMultipleChoiceField,
            ):
                yield filterset, name, filter_


@pytest.mark.django_db
def test_every_numeric_and_object_filter_refuses_a_value_beyond_64_bits_before_any_query(
    django_assert_num_queries,
):
    checked = 0
    for filterset, name, filter_ in _numeric_filters():
        value = [HUGE] if filter_.field_class is core_filters.Int64ModelMultipleChoiceField else HUGE
        fs = filterset(data={name: value}, queryset=filterset._meta.model.objects.all())
        with django_assert_num_queries(0):
            valid = fs.is_valid()
        assert not valid, f"{filterset.__name__}.{name} accepted {HUGE}"
        assert name in fs.errors
        checked += 1
    assert checked >= 15


@pytest.mark.django_db
def test_an_auto_generated_foreign_key_filter_refuses_a_huge_id():
    """A FilterSet whose Meta.fields names a foreign key gets a ModelChoiceFilter; its id is checked too."""
    from apps.jobs.models import Job

    class JobByTemplate(core_filters.FilterSet):
        class Meta:
            model = Job
            fields = ["template"]

    assert JobByTemplate.base_filters["template"].field_class is core_filters.Int64ModelChoiceField
    fs = JobByTemplate(data={"template": HUGE}, queryset=Job.objects.all())
    assert not fs.is_valid()
    assert "out of range" in str(fs.errors["template"])
    # In range and unknown: the ordinary "not one of the choices" answer, still a 400.
    fs = JobByTemplate(data={"template": "123456"}, queryset=Job.objects.all())
    assert not fs.is_valid()


@pytest.mark.django_db
def test_the_api_answers_400_for_a_huge_id_filter_and_404_for_a_huge_path_id(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    response = api_client.get("/api/inventory/device-events/", {"device": HUGE})
    assert response.status_code == 400
    assert "device" in response.json()["error"]["details"]
    assert api_client.get("/api/inventory/device-events/", {"device": "12"}).status_code == 200
    for path in (
        "/api/inventory/devices/",
        "/api/jobs/jobs/",
        "/api/telemetry/jobs/",
        "/api/telemetry/projects/",
    ):
        response = api_client.get(f"{path}{HUGE}/")
        assert response.status_code == 404, path
