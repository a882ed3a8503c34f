"""One FilterSet per model, shared by the API and the pages."""

import django_filters

from apps.core.filters import FilterSet
from apps.quotas.models import Quota, ResourceClass


class QuotaFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    department = django_filters.CharFilter(method="filter_department")
    resource_class = django_filters.ChoiceFilter(choices=ResourceClass.choices)
    owner = django_filters.ChoiceFilter(
        choices=[("project", "project"), ("department", "department")], method="filter_owner"
    )

    class Meta:
        model = Quota
        fields = ["project", "department", "resource_class", "vendor"]

    def filter_department(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(Q(department__slug=value) | Q(project__department__slug=value))

    def filter_owner(self, queryset, name, value):
        return queryset.filter(project__isnull=(value == "department"))
