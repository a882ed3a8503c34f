"""Forms for the catalog pages: the compute-template editor and the request-template import (the
list pages filter with apps.catalog.filtersets).

The editor form only shapes input (memory in whole GiB); the rules are the model's and the
services' (ComputeTemplate.clean via compute_template_create / _update), whose field errors the
view puts back on the form.
"""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import ComputeTemplate, DeviceModel, Isolation
from apps.catalog.request_spec import MAX_TEXT_BYTES

# Service / model field names -> editor field names.
FIELD_MAP = {"memory_mib": "memory_gib", "non_field_errors": None, "__all__": None, "slug": "name"}


class _ModelChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: DeviceModel) -> str:
        return f"{obj.get_vendor_display()} · {obj.name}"


class ComputeTemplateForm(forms.Form):
    """The editor: memory in whole GiB; with a partition profile, memory, share and instances may be
    left empty and come from the profile."""

    device_model = _ModelChoiceField(label=_("Device model"), queryset=DeviceModel.objects.none())
    name = forms.CharField(label=_("Name"), max_length=100)
    partition_profile = forms.CharField(
        label=_("Partition profile"),
        required=False,
        max_length=40,
        help_text=_(
            "A MIG profile (3g.40gb) or an Ascend vNPU template (vir05_1c_16g); blank for a soft slice."
        ),
        widget=forms.TextInput(
            attrs={"list": "profile-options", "autocomplete": "off", "spellcheck": "false"}
        ),
    )
    memory_gib = forms.IntegerField(
        label=_("Memory (GiB)"),
        required=False,
        min_value=1,
        max_value=1 << 21,
        help_text=_("Whole GiB, at most the card's memory. Fixed by a partition profile."),
    )
    compute_share = forms.DecimalField(
        label=_("Compute share (%)"),
        required=False,
        max_digits=5,
        decimal_places=2,
        help_text=_("1–100 % of the card's compute (100 % = the whole card). Fixed by a partition profile."),
    )
    isolation = forms.ChoiceField(
        label=_("Isolation"),
        choices=Isolation.choices,
        initial=Isolation.HARD,
        widget=forms.RadioSelect,
        help_text=_("Hard: memory and compute are enforced. Shared: compute is shared with neighbours."),
    )
    max_instances = forms.IntegerField(
        label=_("Max instances per card"),
        required=False,
        min_value=1,
        max_value=32767,
        help_text=_("How many of these fit on one card; instances × memory must fit the card."),
    )
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 3})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["device_model"].queryset = DeviceModel.objects.order_by("vendor", "name")

    def service_values(self) -> dict:
        """cleaned_data -> keyword arguments for the services (memory in MiB)."""
        data = dict(self.cleaned_data)
        gib = data.pop("memory_gib", None)
        data["memory_mib"] = None if gib is None else gib * 1024
        return data

    def add_service_errors(self, details) -> None:
        """Put a service's field errors on the form (memory_mib -> memory_gib; others as non-field)."""
        if not isinstance(details, dict):
            return
        for field, messages in details.items():
            target = FIELD_MAP.get(field, field)
            if target not in self.fields:
                target = None
            for message in messages if isinstance(messages, list) else [messages]:
                if target is None or target not in self.errors:
                    self.add_error(target, str(message))

    @classmethod
    def initial_from(cls, template: ComputeTemplate, *, copy: bool = False) -> dict:
        return {
            "device_model": template.device_model_id,
            "name": (_("%(name)s (copy)") % {"name": template.name}) if copy else template.name,
            "partition_profile": template.partition_profile,
            "memory_gib": template.memory_gib,
            "compute_share": template.compute_share,
            "isolation": template.isolation,
            "max_instances": template.max_instances,
            "description": "" if copy and template.is_builtin else template.description,
        }


class RequestTemplateImportForm(forms.Form):
    document = forms.CharField(
        label=_("YAML document"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "mono"}),
        help_text=_("apiVersion suanchi.io/v1 or scheduling.example.io/v1, kind DeviceRequestTemplate."),
    )
    file = forms.FileField(label=_("or a file"), required=False)

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("file")
        if upload is not None:
            if upload.size > MAX_TEXT_BYTES:
                raise forms.ValidationError(_("The file is larger than 64 KiB."))
            try:
                cleaned["document"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError(_("The file is not UTF-8 text."))
        if not (cleaned.get("document") or "").strip():
            raise forms.ValidationError(_("Paste a YAML document or choose a file."))
        return cleaned
