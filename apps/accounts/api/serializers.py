from django.contrib.auth import get_user_model
from rest_framework import serializers

from apps.accounts.expiry import parse_expiry
from apps.accounts.models import ApiToken, Department, Membership, Project


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["id", "name", "slug", "description"]


class ProjectSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", queryset=Department.objects.all())

    class Meta:
        model = Project
        fields = ["id", "department", "name", "slug", "namespace", "description", "is_active"]


class MembershipSerializer(serializers.ModelSerializer):
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "project", "role"]


class MeSerializer(serializers.ModelSerializer):
    memberships = MembershipSerializer(many=True, read_only=True)

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "email", "is_staff", "memberships"]


class ExpiryField(serializers.DateTimeField):
    """A token's expiry as ``apps.accounts.expiry.parse_expiry`` reads it: a date (the end of that
    day) or a date and time; an impossible or out-of-bounds one is a 400 whose message says why."""

    def to_internal_value(self, value):
        return parse_expiry(value, field=self.field_name)


class ApiTokenSerializer(serializers.ModelSerializer):
    expires_at = ExpiryField(required=False, allow_null=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked"]
        read_only_fields = ["prefix", "created_at", "last_used_at", "revoked"]
