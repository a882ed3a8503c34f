from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.cache import add_never_cache_headers
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts import selectors, services
from apps.accounts.api import serializers as s
from apps.accounts.api.permissions import MintsNoTokens
from apps.accounts.models import ApiToken, Department, Membership
from apps.core.api.permissions import IsStaffOrReadOnly, IsUser
from apps.core.throttling import FailSoftUserRateThrottle


class DepartmentViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = s.DepartmentSerializer
    search_fields = ["name", "slug"]

    def get_queryset(self):
        user = self.request.user
        if selectors.is_platform_staff(user):
            return Department.objects.all()
        return Department.objects.filter(projects__in=selectors.project_list(user=user)).distinct()


class ProjectViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = s.ProjectSerializer
    permission_classes = [IsStaffOrReadOnly]
    filterset_fields = ["department__slug", "is_active"]
    search_fields = ["name", "slug", "namespace"]

    def get_queryset(self):
        return selectors.project_list(user=self.request.user)

    def perform_create(self, serializer):
        serializer.instance = services.project_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(responses=s.MembershipSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def members(self, request, pk=None):
        project = self.get_object()
        memberships = Membership.objects.filter(project=project).select_related("user", "project")
        return Response(s.MembershipSerializer(memberships, many=True).data)


class TokenThrottle(FailSoftUserRateThrottle):
    scope = "token"


class ApiTokenViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """The caller's own API tokens. The key is returned once, at creation (``Cache-Control: no-store``).
    Creating a token, or revoking another than the one in use, needs a signed-in session."""

    serializer_class = s.ApiTokenSerializer
    throttle_classes = [TokenThrottle]
    permission_classes = [IsUser, MintsNoTokens]

    queryset = ApiToken.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, key = services.api_token_create(
            user=request.user,
            name=serializer.validated_data["name"],
            expires_at=serializer.validated_data.get("expires_at"),
            actor=request.user,
        )
        body = s.ApiTokenSerializer(token).data
        body["key"] = key
        response = Response(body, status=status.HTTP_201_CREATED)
        add_never_cache_headers(response)  # the one answer that carries the key
        return response

    @transaction.atomic
    def perform_destroy(self, instance):
        services.api_token_revoke(token=instance, actor=self.request.user)


class _OneObjectSchema(AutoSchema):
    """``list`` on /me/ answers one object, not an array."""

    def _is_list_view(self, serializer=None) -> bool:
        return False


class MeViewSet(viewsets.ViewSet):
    schema = _OneObjectSchema()

    @extend_schema(responses=s.MeSerializer)
    def list(self, request):
        # Not type(request.user): under session authentication that is Django's SimpleLazyObject.
        user = get_user_model().objects.prefetch_related("memberships__project").get(pk=request.user.pk)
        return Response(s.MeSerializer(user).data)
