"""Forms of the billing pages: the staff console's inputs (adjustments, rate cards, month close);
the filter bars are the FilterSets' forms (apps.billing.filtersets). Writes go through
apps.billing.services; their errors become form errors."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.billing.models import IdlePolicy, RateCard
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.inventory.models import Pool

MONTH_WIDGET = forms.TextInput(attrs={"type": "month", "placeholder": "YYYY-MM"})


class AdjustmentForm(forms.Form):
    project = forms.ModelChoiceField(label=_("Project"), queryset=Project.objects.order_by("name"))
    amount = forms.DecimalField(
        label=_("Amount"), max_digits=14, decimal_places=2, help_text=_("negative = credit")
    )
    reason = forms.CharField(label=_("Reason"), max_length=500)
    corrects_bill = forms.IntegerField(label=_("Corrects bill #"), required=False)


class RateCardForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=120)
    scope = forms.ChoiceField(label=_("Scope"), choices=RateCard.Scope.choices)
    pool = forms.ModelChoiceField(label=_("Pool"), queryset=Pool.objects.all(), required=False)
    device_model = forms.ModelChoiceField(
        label=_("Device model"), queryset=DeviceModel.objects.order_by("vendor", "name"), required=False
    )
    template = forms.ModelChoiceField(
        label=_("Compute template"), queryset=ComputeTemplate.objects.order_by("name"), required=False
    )
    price_per_cu_hour = forms.DecimalField(label=_("Price per CU-hour"), max_digits=12, decimal_places=4)
    currency = forms.CharField(label=_("Currency"), max_length=3, initial="CNY")
    effective_from = forms.DateField(
        label=_("Effective from"), widget=forms.DateInput(attrs={"type": "date"})
    )
    effective_to = forms.DateField(
        label=_("Effective to (inclusive)"), required=False, widget=forms.DateInput(attrs={"type": "date"})
    )


class MonthCloseForm(forms.Form):
    month = forms.CharField(label=_("Month"), widget=MONTH_WIDGET)
    idle_policy = forms.ChoiceField(label=_("Idle-cost policy"), choices=IdlePolicy.choices)
    finalize = forms.BooleanField(label=_("Finalize the bills"), required=False, initial=True)
