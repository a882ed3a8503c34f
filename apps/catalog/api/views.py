from django.http import HttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from apps.catalog import request_spec, selectors, services
from apps.catalog.api import serializers as s
from apps.catalog.filtersets import (
    ComputeCoefficientFilterSet,
    ComputeTemplateFilterSet,
    DeviceModelFilterSet,
    DeviceRequestTemplateFilterSet,
)
from apps.catalog.models import ComputeTemplate
from apps.core.api.parsers import DepthLimitedJSONParser
from apps.core.api.permissions import IsStaffOrReadOnly, IsUser
from apps.core.errors import ApplicationError, ParseFailed, ValidationFailed


class DeviceModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The device catalog (public spec data: any signed-in user may read it, it is not project-scoped)."""

    serializer_class = s.DeviceModelSerializer
    filterset_class = DeviceModelFilterSet
    permission_classes = [IsUser]
    ordering_fields = ["vendor", "name", "memory_mib", "fp16_dense_tflops", "bf16_dense_tflops"]
    ordering = ["vendor", "name"]
    search_fields = ["name", "slug"]

    def get_queryset(self):
        return selectors.device_model_list()

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="mig-layout")
    def mig_layout(self, request, pk=None):
        """Check a per-card MIG layout ({"layout": {"3g.40gb": 1, "4g.40gb": 1}}) against NVIDIA's
        placements: 200 with a start slot per instance, or 400 saying why no placement exists."""
        layout = request.data.get("layout") if hasattr(request.data, "get") else None
        return Response(services.mig_layout_check(self.get_object(), layout))


class ComputeCoefficientViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Coefficient versions. Anyone signed in may read them; platform staff add new versions."""

    serializer_class = s.ComputeCoefficientSerializer
    filterset_class = ComputeCoefficientFilterSet
    permission_classes = [IsStaffOrReadOnly]
    ordering_fields = ["effective_from", "created_at", "value"]
    ordering = ["device_model__name", "-effective_from"]

    def get_queryset(self):
        return selectors.compute_coefficient_list()

    @extend_schema(
        request=s.ComputeCoefficientCreateSerializer, responses={201: s.ComputeCoefficientSerializer}
    )
    def create(self, request, *args, **kwargs):
        data = s.ComputeCoefficientCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        coefficient = services.compute_coefficient_set(actor=request.user, **data.validated_data)
        body = s.ComputeCoefficientSerializer(self.get_queryset().get(pk=coefficient.pk)).data
        return Response(body, status=status.HTTP_201_CREATED)


# ------------------------------------------------------------------ compute templates

_DOCUMENT_FORMATS = {
    "yaml": "application/yaml; charset=utf-8",
    "json": "application/json; charset=utf-8",
}


def _document_format(request) -> str:
    # DRF's URL_FORMAT_OVERRIDE is off, so "format" is ours to read.
    fmt = (request.query_params.get("format") or "yaml").strip().lower()
    if fmt not in _DOCUMENT_FORMATS:
        raise ValidationFailed(
            _("unknown format %(format)r: use yaml or json") % {"format": fmt},
            details={"format": ["use yaml or json"]},
        )
    return fmt


def _document_response(text: str, fmt: str, *, filename: str, download: bool) -> HttpResponse:
    response = HttpResponse(text, content_type=_DOCUMENT_FORMATS[fmt])
    disposition = "attachment" if download else "inline"
    response["Content-Disposition"] = f'{disposition}; filename="{filename}.{fmt}"'
    return response


def _gib_field_errors(exc: ApplicationError, request_data) -> ApplicationError:
    """Report memory errors under the field the client sent (memory_gib or memory_mib)."""
    details = exc.details
    if (
        isinstance(details, dict)
        and "memory_mib" in details
        and hasattr(request_data, "get")
        and request_data.get("memory_gib") not in (None, "")
        and request_data.get("memory_mib") in (None, "")
    ):
        details["memory_gib"] = details.pop("memory_mib")
    return exc


class ComputeTemplateViewSet(viewsets.ModelViewSet):
    """Compute templates (算力模板): slices of a card model. Anyone signed in may read them (with
    their compute-unit value and definition); platform staff create, change, retire and delete
    custom templates. Built-in templates are generated from the catalog and are read-only (409)."""

    serializer_class = s.ComputeTemplateSerializer
    filterset_class = ComputeTemplateFilterSet
    permission_classes = [IsStaffOrReadOnly]
    ordering_fields = ["name", "memory_mib", "compute_share", "max_instances", "created_at"]
    ordering = ["device_model__vendor", "device_model__name", "-memory_mib", "name"]
    search_fields = ["name", "slug", "device_model__name", "partition_profile"]

    def get_queryset(self):
        return selectors.compute_template_list()

    def _read(self, template) -> dict:
        return s.ComputeTemplateSerializer(self.get_queryset().get(pk=template.pk)).data

    @extend_schema(request=s.ComputeTemplateWriteSerializer, responses={201: s.ComputeTemplateSerializer})
    def create(self, request, *args, **kwargs):
        data = s.ComputeTemplateWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            template = services.compute_template_create(actor=request.user, **data.validated_data)
        except ApplicationError as exc:
            raise _gib_field_errors(exc, request.data)
        return Response(self._read(template), status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ComputeTemplateWriteSerializer, responses={200: s.ComputeTemplateSerializer})
    def update(self, request, *args, **kwargs):
        partial = kwargs.pop("partial", False)
        template = self.get_object()
        data = s.ComputeTemplateWriteSerializer(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        try:
            template = services.compute_template_update(
                template=template, actor=request.user, **data.validated_data
            )
        except ApplicationError as exc:
            raise _gib_field_errors(exc, request.data)
        return Response(self._read(template))

    def destroy(self, request, *args, **kwargs):
        services.compute_template_delete(template=self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.RetireSerializer, responses={200: s.ComputeTemplateSerializer})
    @action(detail=True, methods=["post"])
    def retire(self, request, pk=None):
        data = s.RetireSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        template = services.compute_template_retire(
            template=self.get_object(), actor=request.user, reason=data.validated_data["reason"]
        )
        return Response(self._read(template))

    @extend_schema(
        parameters=[
            OpenApiParameter("format", str, enum=["yaml", "json"], description="yaml (default) or json"),
            OpenApiParameter("download", bool, description="send as an attachment"),
        ],
        responses={
            (200, "application/yaml"): OpenApiTypes.STR,
            (200, "application/json"): OpenApiTypes.OBJECT,
        },
    )
    @action(detail=True, methods=["get"])
    def describe(self, request, pk=None):
        """The template's definition as YAML (default) or JSON."""
        fmt = _document_format(request)
        template = self.get_object()
        text = selectors.template_render(selectors.template_describe(template), fmt)
        return _document_response(
            text, fmt, filename=template.slug, download=request.query_params.get("download") in ("1", "true")
        )

    @extend_schema(
        request=s.ComputeTemplateWriteSerializer, responses={200: s.ComputeTemplatePreviewSerializer}
    )
    @action(detail=False, methods=["post"], permission_classes=[IsUser])
    def preview(self, request):
        """Validate a template without saving it: {"valid", "errors", "definition", "yaml"}.

        Always 200 (the editor's live preview); ``errors`` maps fields to messages. With "id", the
        input is checked as a change of that template."""
        data = s.ComputeTemplateWriteSerializer(data=request.data)
        if not data.is_valid():
            errors = {field: [str(m) for m in messages] for field, messages in data.errors.items()}
            return Response({"valid": False, "errors": errors, "definition": None, "yaml": ""})
        instance = None
        template_id = request.data.get("id") if hasattr(request.data, "get") else None
        if str(template_id or "").isdigit():
            instance = ComputeTemplate.objects.select_related("device_model").filter(pk=template_id).first()
        values = data.validated_data
        try:
            template = services.compute_template_build(**values, instance=instance)
        except ApplicationError as exc:
            exc = _gib_field_errors(exc, request.data)
            errors = exc.details if isinstance(exc.details, dict) else {"non_field_errors": [exc.message]}
            return Response({"valid": False, "errors": errors, "definition": None, "yaml": ""})
        document = selectors.template_describe(
            template, coefficient=selectors.coefficient_on(template.device_model)
        )
        return Response(
            {"valid": True, "errors": {}, "definition": document, "yaml": selectors.template_render(document)}
        )


# ------------------------------------------------------------------ request templates


class PlainTextParser(BaseParser):
    """A YAML (or plain text) request body, handed over as a string."""

    media_type = "text/*"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(request_spec.MAX_TEXT_BYTES + 1)
        if len(raw) > request_spec.MAX_TEXT_BYTES:
            raise ParseFailed(
                _("the document is larger than %(kib)d KiB") % {"kib": request_spec.MAX_TEXT_BYTES // 1024}
            )
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseFailed(_("the document is not UTF-8 text"))


class YAMLParser(PlainTextParser):
    media_type = "application/yaml"


class XYAMLParser(PlainTextParser):
    media_type = "application/x-yaml"


class DeviceRequestTemplateViewSet(mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Device request templates (seed 000 §3.2): mixed GPU/NPU requests with a topology policy.
    Anyone signed in may read and export them; platform staff import and delete."""

    serializer_class = s.DeviceRequestTemplateSerializer
    filterset_class = DeviceRequestTemplateFilterSet
    permission_classes = [IsStaffOrReadOnly]
    ordering_fields = ["name", "created_at", "updated_at"]
    ordering = ["name"]
    search_fields = ["name"]

    def get_queryset(self):
        return selectors.request_template_list()

    def perform_destroy(self, instance):
        services.request_template_delete(template=instance, actor=self.request.user)

    @extend_schema(
        request={
            "application/json": s.RequestTemplateImportSerializer,
            "application/yaml": OpenApiTypes.STR,
            "text/yaml": OpenApiTypes.STR,
        },
        responses={
            201: s.RequestTemplateImportResultSerializer,
            200: s.RequestTemplateImportResultSerializer,
        },
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        parser_classes=[DepthLimitedJSONParser, YAMLParser, XYAMLParser, PlainTextParser],
    )
    def import_document(self, request):
        """Import a DeviceRequestTemplate: a YAML body (text/yaml, application/yaml), JSON
        {"yaml": "..."}, or the document itself as JSON. Upsert by metadata.name; 201 when created,
        200 when updated or unchanged; warnings name model names the catalog cannot pin down."""
        body = request.data
        text, data = None, None
        if isinstance(body, str):
            text = body
        elif hasattr(body, "get") and "apiVersion" in body:
            data = dict(body)
        else:
            wrapped = s.RequestTemplateImportSerializer(data=body)
            wrapped.is_valid(raise_exception=True)
            text = wrapped.validated_data["yaml"]
        template, warnings = services.request_template_import(text=text, data=data, actor=request.user)
        outcome = getattr(template, "import_outcome", "updated")
        body = {
            "outcome": outcome,
            "warnings": warnings,
            "template": s.DeviceRequestTemplateSerializer(template).data,
        }
        return Response(body, status=status.HTTP_201_CREATED if outcome == "created" else status.HTTP_200_OK)

    @extend_schema(
        parameters=[
            OpenApiParameter("format", str, enum=["yaml", "json"], description="yaml (default) or json"),
            OpenApiParameter("download", bool, description="send as an attachment"),
        ],
        responses={
            (200, "application/yaml"): OpenApiTypes.STR,
            (200, "application/json"): OpenApiTypes.OBJECT,
        },
    )
    @action(detail=True, methods=["get"])
    def export(self, request, pk=None):
        """The template in the seed's shape, ready to import again."""
        fmt = _document_format(request)
        template = self.get_object()
        text = services.request_template_export(template, fmt=fmt)
        return _document_response(
            text, fmt, filename=template.slug, download=request.query_params.get("download") in ("1", "true")
        )
