"""The job API (/api/jobs/jobs/): list, retrieve, submit, cancel, events, allocations, the latest trace.

It sits with the job models (a web module) but answers with what scheduling knows (allocations,
decision traces, "why pending?") and writes through the job lifecycle (``apps.scheduling.lifecycle``);
its serializers are ``apps.jobs.api.serializers``.
"""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts.selectors import is_platform_staff, project_list
from apps.benchlib import services as benchlib_services
from apps.benchlib.api.serializers import MeasurementSerializer, ThroughputReportSerializer
from apps.core.errors import NotFound
from apps.core.stored_text import localize
from apps.jobs import selectors
from apps.jobs.api import serializers as s
from apps.jobs.filtersets import JobFilterSet
from apps.jobs.models import Allocation, Job
from apps.scheduling import lifecycle
from apps.scheduling.engine_texts import explanation_for_reader
from apps.scheduling.models import DecisionTrace
from apps.scheduling.selectors import why_pending


class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.JobSerializer
    filterset_class = JobFilterSet
    ordering_fields = ["created_at", "priority", "state"]
    search_fields = ["name"]

    def get_queryset(self):
        return selectors.job_list(user=self.request.user)

    @extend_schema(request=s.JobSubmitSerializer, responses={201: s.JobSerializer})
    def create(self, request, *args, **kwargs):
        data = s.JobSubmitSerializer(data=request.data)
        # Only the caller's projects resolve: another project's slug reads as unknown, not forbidden.
        data.fields["project"].queryset = project_list(user=request.user)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        project = values.pop("project")
        job = lifecycle.job_submit(project=project, actor=request.user, **values)
        return Response(
            s.JobSerializer(self.get_queryset().get(pk=job.pk)).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(request=s.CancelSerializer, responses=s.JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        data = s.CancelSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        lifecycle.job_cancel(job=job, actor=request.user, reason=data.validated_data["reason"])
        return Response(s.JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(request=ThroughputReportSerializer, responses={201: MeasurementSerializer})
    @action(detail=True, methods=["post"])
    def throughput(self, request, pk=None):
        """The job's measured throughput for its workload profile (benchmark library): members of the
        job's project post it (e.g. with an API token at the job's end); the card, template and share come
        from the job's allocations. One report per attempt."""
        # Not get_object(): a job of another project is a clear 403 here, not a 404 (issue 22).
        job = (
            Job.objects.select_related("project", "workload_profile", "template").filter(pk=int(pk)).first()
            if str(pk).isdigit() and int(pk) < 2**63
            else None
        )
        if job is None:
            raise NotFound(f"Job {pk} does not exist.")
        benchlib_services.job_report_allowed(job=job, user=request.user)
        measurement = benchlib_services.job_report(
            job=job, data=dict(request.data.items()), actor=request.user
        )
        body = MeasurementSerializer(measurement, context={"visible_projects": None}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(responses=s.JobEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def events(self, request, pk=None):
        job = self.get_object()
        return Response(s.JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(responses=s.AllocationSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def allocations(self, request, pk=None):
        job = self.get_object()
        rows = Allocation.objects.filter(job=job).select_related("node", "device")
        return Response(s.AllocationSerializer(rows, many=True).data)

    # Not named ``trace``: DRF dispatches the HTTP method TRACE to a view attribute of that name
    # (APIView.dispatch), which ran this detail action without a pk (issue 15, finding 5b).
    @extend_schema(responses=s.DecisionTraceSerializer, operation_id="jobs_jobs_trace_retrieve")
    @action(detail=True, methods=["get"], url_path="trace", url_name="trace")
    def decision_trace(self, request, pk=None):
        """The latest decision: "why this card?" or "why pending?" with the queue position."""
        job = self.get_object()
        trace = DecisionTrace.objects.filter(job=job).order_by("-created_at", "-id").first()
        body = s.DecisionTraceSerializer(trace, context={"request": request}).data if trace else {}
        if trace is not None:  # counting only the nodes this reader can see (engine_texts)
            staff = is_platform_staff(request.user)
            body["explanation"] = localize(explanation_for_reader(trace.explanation, staff=staff))
        answer = why_pending(job, request.user)  # quota + device fit + position among what one sees + ETA
        body["queue_position"] = answer["queue_position"]
        body["eta_minutes"] = answer["eta"]["minutes"] if answer.get("eta") else None
        body["why_pending"] = answer["text"] if answer["queued"] else ""
        body["state"] = job.state
        return Response(body)
