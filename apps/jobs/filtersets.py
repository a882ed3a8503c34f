"""One FilterSet per model, shared by the API and the pages.

The job list page filters with ``JobPageFilterSet`` through ``apps.core.filters.page_filter``: the
API's FilterSet with the page's own parameters where they differ in kind (a project picked by id
among the user's projects, one state, a name ``search``); the API keeps ``JobFilterSet``.
"""

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.accounts.selectors import project_list
from apps.core.filters import FilterSet, name_search_filter
from apps.jobs.models import Job, JobState


class JobFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    kind = django_filters.ChoiceFilter(choices=Job.Kind.choices)
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = Job
        fields = ["project", "state", "kind", "priority_class", "request_kind"]


def _visible_projects(request):
    user = getattr(request, "user", None)
    return project_list(user=user).order_by("name") if user is not None else Project.objects.none()


class JobPageFilterSet(JobFilterSet):
    """The job list page: a project the user can see (an invisible one is a field error), one state."""

    search = name_search_filter(_("Job name"))
    project = django_filters.ModelChoiceFilter(
        queryset=_visible_projects, label=_("Project"), empty_label=_("All")
    )
    state = django_filters.ChoiceFilter(choices=JobState.choices, label=_("State"), empty_label=_("All"))
    kind = django_filters.ChoiceFilter(choices=Job.Kind.choices, label=_("Kind"), empty_label=_("All"))
    mine = django_filters.BooleanFilter(
        label=_("My jobs"),
        method="filter_mine",
        widget=forms.CheckboxInput(),
    )

    def filter_mine(self, queryset, name, value):
        user = getattr(self.request, "user", None)
        if not value or user is None:
            return queryset
        return queryset.filter(submitted_by=user)
