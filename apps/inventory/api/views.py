from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from apps.core.api.parsers import DepthLimitedJSONParser
from apps.core.api.permissions import IsAgentOrStaff, IsStaff, is_agent
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.inventory import selectors
from apps.inventory.api import serializers as s
from apps.inventory.filtersets import (
    DeviceEventFilterSet,
    DeviceFilterSet,
    NodeFilterSet,
    NodeReportFilterSet,
    PoolFilterSet,
)
from apps.inventory.models import Cluster
from apps.scheduling.faults import node_moved, node_status_change


def _ledger():
    from apps.inventory.services import ledger

    return ledger


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.ClusterSerializer
    search_fields = ["name", "slug"]

    def get_queryset(self):
        return selectors.cluster_list(user=self.request.user)


class PoolViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.PoolSerializer
    filterset_class = PoolFilterSet

    def get_queryset(self):
        return selectors.pool_list(user=self.request.user)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "status", "last_report_at"]

    def get_queryset(self):
        user = self.request.user
        # A correlated count, computed for the page's rows only: a JOIN + GROUP BY over every card of
        # the fleet made each page (and its COUNT) aggregate 80,000 rows (issue 20).
        cards = (
            selectors.device_list(user=user)
            .exclude(health="retired")
            .filter(node=OuterRef("pk"))
            .order_by()
            .values("node")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return (
            selectors.node_list(user=user)
            .annotate(device_count=Coalesce(Subquery(cards, output_field=IntegerField()), Value(0)))
            .order_by("cluster__name", "name")
        )

    @extend_schema(request=s.StatusChangeInputSerializer, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def status(self, request, pk=None):
        node = self.get_object()
        data = s.StatusChangeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        node_status_change(node=node, actor=request.user, **data.validated_data)
        return Response(s.NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=None, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def approve(self, request, pk=None):
        """Admit a node an agent registered (pending approval): it takes work from now on."""
        node = self.get_object()
        from apps.inventory.services import discovery

        discovery.node_approve(node=node, actor=request.user)
        return Response(s.NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(
        responses=inline_serializer(
            "NodeTopology",
            fields={
                "node": serializers.CharField(),
                "devices": serializers.ListField(child=serializers.DictField()),
                "links": s.DeviceLinkSerializer(many=True),
                "rdma_nics": serializers.JSONField(),
            },
        )
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def topology(self, request, pk=None):
        node = self.get_object()
        links = selectors.device_link_list(user=request.user, node=node)
        devices = selectors.device_list(user=request.user).filter(node=node).order_by("vendor", "index")
        return Response(
            {
                "node": node.name,
                "devices": [
                    {
                        "index": d.index,
                        "vendor": d.vendor,
                        "uuid": d.uuid,
                        "numa_node": d.numa_node,
                        "topology_group": d.topology_group,
                    }
                    for d in devices
                ],
                "links": s.DeviceLinkSerializer(links, many=True).data,
                "rdma_nics": node.rdma_nics,
            }
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("requirement", OpenApiTypes.STR, required=True, description='e.g. "cuda 12.4"'),
            OpenApiParameter("vendor", OpenApiTypes.STR),
            OpenApiParameter("allow_minor_version_compat", OpenApiTypes.BOOL),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    @action(detail=True, methods=["get"])
    def precheck(self, request, pk=None):
        node = self.get_object()
        data = s.PrecheckInputSerializer(data=request.query_params)
        data.is_valid(raise_exception=True)
        vendor = data.validated_data.get("vendor")
        if not vendor:
            vendors = list(
                selectors.device_list(user=request.user)
                .filter(node=node)
                .order_by("vendor")  # the default ordering's columns would make DISTINCT per card
                .values_list("vendor", flat=True)
                .distinct()
            )
            if len(vendors) != 1:
                raise ValidationFailed(
                    (
                        _("Say which vendor's runtime to check: this node has %(vendors)s")
                        % {"vendors": ", ".join(sorted(vendors))}
                        if vendors
                        else _("Say which vendor's runtime to check: this node has no visible devices")
                    ),
                    details={"vendor": ["required"]},
                )
            vendor = vendors[0]
        from apps.inventory import compat

        result = compat.node_precheck(
            node,
            data.validated_data["requirement"],
            vendor=vendor,
            allow_minor_version_compat=data.validated_data["allow_minor_version_compat"],
        )
        return Response({"node": node.name, "vendor": vendor, **result.as_dict()})


class DeviceViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.DeviceSerializer
    filterset_class = DeviceFilterSet
    ordering_fields = ["node__name", "index", "health"]
    search_fields = ["uuid", "serial", "node__name", "pci_bus_id"]

    def get_queryset(self):
        return selectors.device_list(user=self.request.user)

    def _respond(self, device):
        return Response(s.DeviceSerializer(self.get_queryset().get(pk=device.pk)).data)

    @extend_schema(request=s.PoolStatusInputSerializer, responses=s.DeviceSerializer)
    @action(detail=True, methods=["post"], url_path="pool-status", permission_classes=[IsStaff])
    def pool_status(self, request, pk=None):
        device = self.get_object()
        data = s.PoolStatusInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _ledger().device_pool_status_set(device=device, actor=request.user, **data.validated_data)
        return self._respond(device)

    @extend_schema(request=s.CordonInputSerializer, responses=s.DeviceSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def cordon(self, request, pk=None):
        device = self.get_object()
        data = s.CordonInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _ledger().device_cordon(device=device, actor=request.user, **data.validated_data)
        return self._respond(device)

    @extend_schema(request=s.ReasonInputSerializer, responses=s.DeviceSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsStaff])
    def retire(self, request, pk=None):
        device = self.get_object()
        data = s.ReasonInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _ledger().device_retire(device=device, actor=request.user, reason=data.validated_data["reason"])
        return self._respond(device)

    @extend_schema(
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["csv", "xlsx"])],
        responses={
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"): OpenApiTypes.BINARY,
        },
    )
    @action(detail=False, methods=["get"])
    def export(self, request):
        fmt = request.query_params.get("format", "csv")
        if fmt not in ("csv", "xlsx"):
            raise ValidationFailed(
                _("Unknown export format %(format)r; use csv or xlsx.") % {"format": fmt},
                details={"format": ["csv", "xlsx"]},
            )
        devices = self.filter_queryset(self.get_queryset())
        content, content_type, filename = _ledger().ledger_export(devices=devices, fmt=fmt)
        response = HttpResponse(content, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    @extend_schema(
        request={"multipart/form-data": s.LedgerImportInputSerializer}, responses=OpenApiTypes.OBJECT
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        permission_classes=[IsStaff],
        parser_classes=[MultiPartParser, FormParser],
    )
    def import_ledger(self, request):
        data = s.LedgerImportInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        report = _ledger().ledger_import_csv(
            data=data.validated_data["file"].read(),
            actor=request.user,
            dry_run=data.validated_data["dry_run"],
            on_node_moved=node_moved,
        )
        return Response(report.as_dict(), status=status.HTTP_200_OK)


class DeviceEventViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.DeviceEventSerializer
    filterset_class = DeviceEventFilterSet

    def get_queryset(self):
        return selectors.device_event_list(user=self.request.user)


class NodeReportViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Node agents post raw tool outputs here; staff may too (and may read the intake log)."""

    serializer_class = s.NodeReportSerializer
    filterset_class = NodeReportFilterSet
    parser_classes = [DepthLimitedJSONParser, MultiPartParser, FormParser]

    def get_permissions(self):
        if self.action == "create":
            return [IsAgentOrStaff()]
        return [IsStaff()]

    def get_queryset(self):
        return selectors.node_report_list(user=self.request.user)

    @extend_schema(request=s.NodeReportInputSerializer, responses=OpenApiTypes.OBJECT)
    def create(self, request, *args, **kwargs):
        data = s.NodeReportInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        cluster = None
        if is_agent(request.user):
            cluster = request.user.cluster
            if values.get("cluster") and values["cluster"] != cluster.slug:
                raise PermissionDenied(
                    _("This agent token belongs to cluster %(cluster)r, not %(asked)r.")
                    % {"cluster": cluster.slug, "asked": values["cluster"]}
                )
        elif values.get("cluster"):
            cluster = Cluster.objects.filter(slug=values["cluster"]).first()
            if cluster is None:
                raise ValidationFailed(
                    _("Unknown cluster %(cluster)r.") % {"cluster": values["cluster"]},
                    details={"cluster": ["unknown"]},
                )
        from apps.inventory.services import discovery

        result = discovery.node_report_ingest(
            node_name=values["node"],
            kind=values["kind"],
            text=values["text"],
            actor=request.user,
            cluster=cluster,
            dry_run=values["dry_run"],
        )
        code = status.HTTP_200_OK if values["dry_run"] else status.HTTP_201_CREATED
        return Response(result.as_dict(), status=code)
