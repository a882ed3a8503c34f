"""One FilterSet per model, shared by the API and the pages."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.billing.forms import MONTH_WIDGET
from apps.billing.models import Adjustment, Bill, BillingPeriod, RateCard, UsageEntry
from apps.billing.selectors import entries_of_job
from apps.billing.services import parse_month
from apps.core.filters import FilterSet, IsoDateTimeFilter


class MonthFilter(django_filters.CharFilter):
    """``YYYY-MM`` → the month's first day (a bad value is a 400 with a precise message)."""

    def filter(self, qs, value):
        if not value:
            return qs
        return qs.filter(**{self.field_name: parse_month(value)})


# The pages' filter bars render these FilterSets' forms (apps.core.filters.page_filter).
class LateSelect(forms.NullBooleanSelect):
    """``late``: all / late only / on time; the values stay NullBooleanSelect's ("true", "false")."""

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.choices = [("", _("all")), ("true", _("late only")), ("false", _("on time"))]

    def format_value(self, value):
        # NullBooleanSelect gives one string, which the option matching reads as a substring test
        # ("" is in "true"): a list selects exactly the option of the value.
        value = super().format_value(value)
        return [value if value in ("true", "false") else ""]


class UsageEntryFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", label=_("Project (slug)"))
    month = MonthFilter(field_name="month", label=_("Month"), widget=MONTH_WIDGET)
    job = django_filters.NumberFilter(method="filter_job")
    allocation = django_filters.NumberFilter(field_name="allocation_id")
    device_model = django_filters.CharFilter(field_name="device_model__slug")
    template = django_filters.CharFilter(field_name="template__slug")
    late = django_filters.BooleanFilter(field_name="late", label=_("Late entries"), widget=LateSelect)
    since = IsoDateTimeFilter(field_name="slice_start", lookup_expr="gte")
    until = IsoDateTimeFilter(field_name="slice_start", lookup_expr="lt")
    q = django_filters.CharFilter(
        method="filter_q", label=_("Search"), help_text=_("job, project, model or id")
    )

    class Meta:
        model = UsageEntry
        fields = ["project", "month", "job", "allocation", "device_model", "template", "late"]

    def filter_job(self, queryset, name, value):
        return entries_of_job(queryset, int(value))

    def filter_q(self, queryset, name, value):
        condition = (
            Q(job__name__icontains=value)
            | Q(project__slug__icontains=value)
            | Q(project__name__icontains=value)
            | Q(device_model__name__icontains=value)
        )
        if value.isdigit():
            condition |= Q(job_id=int(value)) | Q(allocation_id=int(value))
        return queryset.filter(condition)


class BillFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", label=_("Project (slug)"))
    month = MonthFilter(field_name="month", label=_("Month"), widget=MONTH_WIDGET)
    state = django_filters.ChoiceFilter(choices=Bill.State.choices)

    class Meta:
        model = Bill
        fields = ["project", "month", "state"]


class AdjustmentFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    month = MonthFilter(field_name="month")

    class Meta:
        model = Adjustment
        fields = ["project", "month"]


class RateCardFilterSet(FilterSet):
    scope = django_filters.ChoiceFilter(choices=RateCard.Scope.choices)
    active_on = django_filters.DateFilter(method="filter_active_on")

    class Meta:
        model = RateCard
        fields = ["scope", "currency"]

    def filter_active_on(self, queryset, name, value):
        return queryset.filter(effective_from__lte=value).filter(
            Q(effective_to__isnull=True) | Q(effective_to__gte=value)
        )


class BillingPeriodFilterSet(FilterSet):
    state = django_filters.ChoiceFilter(choices=BillingPeriod.State.choices)

    class Meta:
        model = BillingPeriod
        fields = ["state"]
