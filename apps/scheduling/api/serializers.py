from rest_framework import serializers

from apps.scheduling.models import DecisionTrace


class DecisionTraceSerializer(serializers.ModelSerializer):
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
