from rest_framework import serializers

from apps.core.api.localized import LocalizedTextsMixin
from apps.scheduling.models import DecisionTrace


class DecisionTraceSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
    localized_fields = ("explanation", "steps")

    class Meta:
        model = DecisionTrace
        fields = [
            "trace_id",
            "created_at",
            "policy",
            "outcome",
            "explanation",
            "queue_position",
            "steps",
            "candidates",
            "placement",
        ]
