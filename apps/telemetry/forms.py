"""GET forms of the telemetry pages. Parameter names match the report API, so export links pass them on."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.telemetry.selectors import GROUPS

GROUP_LABELS = {
    "vendor": _("vendor"),
    "model": _("model"),
    "pool": _("pool"),
    "node": _("node"),
    "cluster": _("cluster"),
}


class PeriodForm(forms.Form):
    start = forms.DateTimeField(
        label=_("From"), required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    end = forms.DateTimeField(
        label=_("To"), required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def __init__(self, data=None, **kwargs):
        super().__init__(data if data else None, **kwargs)

    @property
    def active(self) -> bool:
        return self.is_bound

    def cleaned(self) -> dict:
        if not self.is_bound or not self.is_valid():
            return {}
        return {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}


class FleetReportForm(PeriodForm):
    group_by = forms.ChoiceField(
        label=_("Group by"), required=False, choices=[(k, GROUP_LABELS[k]) for k in GROUPS]
    )


class ComparisonForm(forms.Form):
    baseline_start = forms.DateTimeField(
        label=_("Baseline from"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    baseline_end = forms.DateTimeField(
        label=_("Baseline to"), widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    current_start = forms.DateTimeField(
        label=_("Current from"), required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    current_end = forms.DateTimeField(
        label=_("Current to"), required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
