import django_filters

from apps.core.filters import FilterSet
from apps.jobs.models import Job, JobState


class JobFilterSet(FilterSet):
    project = django_filters.CharFilter(field_name="project__slug")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    kind = django_filters.ChoiceFilter(choices=Job.Kind.choices)
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = Job
        fields = ["project", "state", "kind", "priority_class", "request_kind"]
