"""Rollout API: CRUD through services, stage changes as @action commands (each calls one service)."""

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts.models import Membership
from apps.accounts.selectors import user_role
from apps.core.api.permissions import IsStaff
from apps.core.errors import PermissionDenied
from apps.rollout import selectors, services
from apps.rollout.api import serializers as s
from apps.rollout.filtersets import (
    AutoscalePolicyFilterSet,
    BenchmarkRunFilterSet,
    GrayBatchFilterSet,
    ScaleDecisionFilterSet,
    SoakResultFilterSet,
    UpgradeWaveFilterSet,
)


class SoakCriteriaViewSet(viewsets.ModelViewSet):
    """Soak criteria (platform staff)."""

    serializer_class = s.SoakCriteriaSerializer
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.criteria_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.SoakCriteriaSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        criteria = services.soak_criteria_create(actor=request.user, **data.validated_data)
        return Response(s.SoakCriteriaSerializer(criteria).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        criteria = self.get_object()
        data = s.SoakCriteriaSerializer(criteria, data=request.data, partial=kwargs.get("partial", False))
        data.is_valid(raise_exception=True)
        criteria = services.soak_criteria_update(criteria=criteria, actor=request.user, **data.validated_data)
        return Response(s.SoakCriteriaSerializer(criteria).data)

    def destroy(self, request, *args, **kwargs):
        services.soak_criteria_delete(criteria=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class GrayBatchViewSet(viewsets.ModelViewSet):
    """Gray-release batches (platform staff). Stages move only through the commands."""

    serializer_class = s.GrayBatchSerializer
    filterset_class = GrayBatchFilterSet
    permission_classes = [IsStaff]
    ordering_fields = ["created_at", "name", "stage"]

    def get_queryset(self):
        return selectors.batch_list(user=self.request.user)

    def _out(self, batch):
        return Response(s.GrayBatchSerializer(self.get_queryset().get(pk=batch.pk)).data)

    @extend_schema(request=s.GrayBatchCreateSerializer, responses={201: s.GrayBatchSerializer})
    def create(self, request, *args, **kwargs):
        data = s.GrayBatchCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        batch = services.batch_create(actor=request.user, **data.validated_data)
        return Response(
            s.GrayBatchSerializer(self.get_queryset().get(pk=batch.pk)).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(request=s.GrayBatchUpdateSerializer, responses=s.GrayBatchSerializer)
    def update(self, request, *args, **kwargs):
        batch = self.get_object()
        data = s.GrayBatchUpdateSerializer(data=request.data, partial=kwargs.get("partial", False))
        data.is_valid(raise_exception=True)
        return self._out(services.batch_update(batch=batch, actor=request.user, **data.validated_data))

    def destroy(self, request, *args, **kwargs):
        services.batch_delete(batch=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses=s.GrayBatchSerializer)
    @action(detail=True, methods=["post"], url_path="start-soak")
    def start_soak(self, request, pk=None):
        """Put the nodes in the gray pool (cards gray; label and taint pushed to Kubernetes)."""
        return self._out(services.batch_soak_start(batch=self.get_object(), actor=request.user))

    @extend_schema(request=None, responses=s.SoakResultSerializer)
    @action(detail=True, methods=["post"])
    def evaluate(self, request, pk=None):
        """Compute the soak result now from telemetry and device events."""
        result = services.batch_evaluate(batch=self.get_object(), actor=request.user)
        return Response(s.SoakResultSerializer(result).data)

    @extend_schema(request=s.ReasonSerializer, responses=s.GrayBatchSerializer)
    @action(detail=True, methods=["post"])
    def admit(self, request, pk=None):
        """Admit a passed batch to production (409 when its soak has not passed)."""
        data = s.ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._out(
            services.batch_admit(batch=self.get_object(), actor=request.user, **data.validated_data)
        )

    @extend_schema(request=s.ReasonSerializer, responses=s.GrayBatchSerializer)
    @action(detail=True, methods=["post"])
    def fail(self, request, pk=None):
        """Fail the batch: its nodes and cards are quarantined."""
        data = s.ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._out(
            services.batch_fail(batch=self.get_object(), actor=request.user, **data.validated_data)
        )

    @extend_schema(request=s.ReasonSerializer, responses=s.RollbackResultSerializer)
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """The change was reverted: gray cards back to production, label and taint removed; nodes its
        failure quarantined are released when that was the only reason (``quarantine`` says which
        stay quarantined and why)."""
        data = s.ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        batch = services.batch_rollback(batch=self.get_object(), actor=request.user, **data.validated_data)
        fresh = self.get_queryset().get(pk=batch.pk)
        fresh.quarantine = batch.quarantine_outcome
        return Response(s.RollbackResultSerializer(fresh).data)

    @extend_schema(request=s.NodeReleaseSerializer, responses=s.GrayBatchSerializer)
    @action(detail=True, methods=["post"], url_path="release-node")
    def release_node(self, request, pk=None):
        """Release a node of a rolled-back batch from quarantine (with a reason)."""
        data = s.NodeReleaseSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        batch = self.get_object()
        services.batch_node_release(batch=batch, actor=request.user, **data.validated_data)
        return self._out(batch)


class SoakResultViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.SoakResultSerializer
    filterset_class = SoakResultFilterSet
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.soak_result_list(user=self.request.user)


class BenchmarkRunViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Measured benchmark runs, posted by the benchmark harness (platform staff tokens)."""

    serializer_class = s.BenchmarkRunSerializer
    filterset_class = BenchmarkRunFilterSet
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.benchmark_run_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.BenchmarkRunSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.benchmark_run_record(actor=request.user, **data.validated_data)
        return Response(s.BenchmarkRunSerializer(run).data, status=status.HTTP_201_CREATED)


class UpgradePlanViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.UpgradePlanSerializer
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.plan_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.UpgradePlanSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        plan = services.upgrade_plan_create(actor=request.user, **data.validated_data)
        return Response(s.UpgradePlanSerializer(plan).data, status=status.HTTP_201_CREATED)


class UpgradeWaveViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Waves: the layer follows the batch's kind; starting refuses to jump a layer (409)."""

    serializer_class = s.UpgradeWaveSerializer
    filterset_class = UpgradeWaveFilterSet
    permission_classes = [IsStaff]

    def get_queryset(self):
        return selectors.wave_list(user=self.request.user)

    def create(self, request, *args, **kwargs):
        data = s.UpgradeWaveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        wave = services.upgrade_wave_create(actor=request.user, **data.validated_data)
        return Response(s.UpgradeWaveSerializer(wave).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.UpgradeWaveSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        wave = services.upgrade_wave_start(wave=self.get_object(), actor=request.user)
        return Response(s.UpgradeWaveSerializer(wave).data)


def _require_manager(user, job) -> None:
    if user_role(user, job.project) not in (Membership.Role.MEMBER, Membership.Role.ADMIN):
        raise PermissionDenied(
            _("only members of %(project)s may change the autoscaling of its services")
            % {"project": job.project.slug}
        )


class AutoscalePolicyViewSet(viewsets.ModelViewSet):
    """Autoscaling policies of inference services: members of the service's project manage them."""

    serializer_class = s.AutoscalePolicySerializer
    filterset_class = AutoscalePolicyFilterSet

    def get_queryset(self):
        return selectors.policy_list(user=self.request.user)

    @extend_schema(request=s.AutoscalePolicyCreateSerializer, responses={201: s.AutoscalePolicySerializer})
    def create(self, request, *args, **kwargs):
        data = s.AutoscalePolicyCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _require_manager(request.user, data.validated_data["job"])
        policy = services.autoscale_policy_create(actor=request.user, **data.validated_data)
        return Response(
            s.AutoscalePolicySerializer(self.get_queryset().get(pk=policy.pk)).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=s.AutoscalePolicyUpdateSerializer, responses=s.AutoscalePolicySerializer)
    def update(self, request, *args, **kwargs):
        policy = self.get_object()
        _require_manager(request.user, policy.job)
        data = s.AutoscalePolicyUpdateSerializer(data=request.data, partial=kwargs.get("partial", False))
        data.is_valid(raise_exception=True)
        policy = services.autoscale_policy_update(policy=policy, actor=request.user, **data.validated_data)
        return Response(s.AutoscalePolicySerializer(self.get_queryset().get(pk=policy.pk)).data)

    def destroy(self, request, *args, **kwargs):
        policy = self.get_object()
        _require_manager(request.user, policy.job)
        services.autoscale_policy_delete(policy=policy, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: s.ScaleDecisionSerializer, 204: None})
    @action(detail=True, methods=["post"])
    def evaluate(self, request, pk=None):
        """Evaluate now: 200 with the decision when it scaled, 204 when it holds (reason on the policy)."""
        policy = self.get_object()
        _require_manager(request.user, policy.job)
        row = services.autoscale_evaluate(policy=policy, actor=request.user)
        if row is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(s.ScaleDecisionSerializer(row).data)


class ScaleDecisionViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.ScaleDecisionSerializer
    filterset_class = ScaleDecisionFilterSet

    def get_queryset(self):
        return selectors.decision_list(user=self.request.user)
