"""Forms for the job pages: the submit form (the list filters with apps.jobs.filtersets).

Every choice list comes from the user's scoped selectors, so a form never offers a project the user
cannot see. The submit form turns the page's friendly inputs (a command line, KEY=VALUE lines, GiB,
hours) into the keyword arguments of ``apps.scheduling.lifecycle.job_submit``; the service
validates the request again against the catalog and the fleet.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal

from django import forms
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Membership, Project
from apps.accounts.selectors import is_platform_staff, project_list
from apps.catalog.models import ComputeTemplate, DeviceModel, DeviceRequestTemplate, Vendor, WorkloadProfile
from apps.core.errors import ValidationFailed
from apps.inventory import compat
from apps.inventory.models import Device
from apps.jobs.models import Job, PriorityClass

SUBMIT_ROLES = (Membership.Role.MEMBER, Membership.Role.ADMIN)
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_COUNT = 64
# Which form fields belong to which request kind (the others are dropped before submission).
REQUEST_FIELDS: dict[str, tuple[str, ...]] = {
    Job.RequestKind.TEMPLATE: ("template", "count"),
    Job.RequestKind.WHOLE_CARDS: ("device_model", "count"),
    Job.RequestKind.COMPUTE_UNITS: ("compute_units", "memory_gib", "allowed_vendors"),
    Job.RequestKind.REQUEST_TEMPLATE: ("request_template",),
    Job.RequestKind.PROFILE: (
        "workload_profile",
        "target_throughput",
        "target_latency_ms",
        "allowed_vendors",
    ),
}
ALL_REQUEST_FIELDS = frozenset(name for names in REQUEST_FIELDS.values() for name in names)
# Service field names that the form spells differently.
SERVICE_TO_FORM = {"memory_mib": "memory_gib", "expected_duration_s": "expected_duration_h"}


def submittable_projects(user) -> QuerySet[Project]:
    """Active projects where ``user`` may submit: member or admin (platform staff: every project)."""
    qs = project_list(user=user).filter(is_active=True)
    if is_platform_staff(user):
        return qs.order_by("name")
    roles = Membership.objects.filter(user=user, role__in=SUBMIT_ROLES).values("project_id")
    return qs.filter(pk__in=roles).order_by("name")


class _TemplateChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ComputeTemplate) -> str:
        model = obj.device_model.name
        return obj.label if obj.name.startswith(model) else f"{model} · {obj.label}"


class _ModelChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: DeviceModel) -> str:
        return f"{obj.get_vendor_display()} {obj.name}"


class JobSubmitForm(forms.Form):
    project = forms.ModelChoiceField(label=_("Project"), queryset=None, empty_label=None)
    name = forms.CharField(label=_("Name"), max_length=120)
    kind = forms.ChoiceField(label=_("Kind"), choices=Job.Kind.choices, initial=Job.Kind.TRAINING)
    image = forms.CharField(
        label=_("Image"),
        max_length=300,
        widget=forms.TextInput(attrs={"placeholder": "registry.example.com/team/pytorch:2.3-cuda12.4"}),
    )
    command = forms.CharField(
        label=_("Command"),
        required=False,
        max_length=4000,
        help_text=_("One line, split like a shell would: quotes keep spaces together."),
        widget=forms.TextInput(attrs={"placeholder": 'torchrun --nproc-per-node 4 train.py --name "run 1"'}),
    )
    env = forms.CharField(
        label=_("Environment"),
        required=False,
        max_length=10000,
        help_text=_("One KEY=VALUE per line; empty lines and lines starting with # are ignored."),
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono", "placeholder": "NCCL_DEBUG=INFO"}),
    )
    runtime_requirement = forms.CharField(
        label=_("Runtime requirement"),
        required=False,
        max_length=60,
        help_text=_(
            "The runtime the image was built for, checked against each node's driver: "
            "cuda 12.4, cann 8.0.RC3, rocm 6.2, dtk 24.04."
        ),
        widget=forms.TextInput(attrs={"placeholder": "cuda 12.4"}),
    )
    request_kind = forms.ChoiceField(
        label=_("Request"),
        choices=Job.RequestKind.choices,
        initial=Job.RequestKind.TEMPLATE,
        widget=forms.RadioSelect,
    )
    template = _TemplateChoiceField(
        label=_("Compute template"), queryset=None, required=False, empty_label=_("Choose a template")
    )
    device_model = _ModelChoiceField(
        label=_("Card model"), queryset=None, required=False, empty_label=_("Choose a card model")
    )
    count = forms.IntegerField(
        label=_("Count"),
        required=False,
        min_value=1,
        max_value=MAX_COUNT,
        initial=1,
        help_text=_("Slices or whole cards per replica."),
    )
    compute_units = forms.DecimalField(
        label=_("Compute units"),
        required=False,
        max_digits=8,
        decimal_places=3,
        min_value=Decimal("0.001"),
        help_text=_("1 CU = one NVIDIA A100 80GB (dense BF16) for an hour."),
    )
    memory_gib = forms.IntegerField(label=_("Memory (GiB)"), required=False, min_value=0, max_value=65536)
    allowed_vendors = forms.MultipleChoiceField(
        label=_("Allowed vendors"),
        required=False,
        choices=Vendor.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None checked: any vendor."),
    )
    request_template = forms.ModelChoiceField(
        label=_("Device request template"),
        queryset=None,
        required=False,
        empty_label=_("Choose a request template"),
    )
    workload_profile = forms.ModelChoiceField(
        label=_("Workload profile"),
        queryset=WorkloadProfile.objects.order_by("key"),
        required=False,
        empty_label=_("Choose a workload profile"),
        to_field_name="key",
        help_text=_("The kind of work; the benchmark library knows its throughput per card and slice."),
    )
    target_throughput = forms.DecimalField(
        label=_("Target throughput"),
        required=False,
        max_digits=14,
        decimal_places=3,
        min_value=Decimal("0.001"),
        help_text=_("In the profile's unit (tokens/s, images/s, samples/s)."),
    )
    target_latency_ms = forms.DecimalField(
        label=_("p99 latency bound (ms)"),
        required=False,
        max_digits=10,
        decimal_places=2,
        min_value=Decimal("0.01"),
    )
    replicas = forms.IntegerField(label=_("Replicas"), min_value=1, max_value=64, initial=1)
    priority_class = forms.ChoiceField(
        label=_("Priority"), choices=PriorityClass.choices, initial=PriorityClass.NORMAL
    )
    expected_duration_h = forms.DecimalField(
        label=_("Expected duration (hours)"),
        required=False,
        max_digits=8,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=Decimal("100000"),
    )
    checkpoint_dir = forms.CharField(
        label=_("Checkpoint directory"),
        required=False,
        max_length=300,
        help_text=_("Where the job saves checkpoints, so a preempted or retried run can resume."),
        widget=forms.TextInput(attrs={"placeholder": "/mnt/checkpoints/run-1"}),
    )
    max_retries = forms.IntegerField(label=_("Max retries"), min_value=0, max_value=20, initial=0)

    # The fields each request kind shows; the page's script hides the others.
    request_fields = REQUEST_FIELDS

    def __init__(self, data=None, *, user, **kwargs):
        super().__init__(data, **kwargs)
        self.user = user
        self.fields["project"].queryset = submittable_projects(user)
        # Only models with cards in the fleet: a request for any other could never be placed.
        in_fleet = Device.objects.exclude(health=Device.Health.RETIRED).values("device_model_id")
        self.fields["template"].queryset = (
            ComputeTemplate.objects.filter(is_retired=False, device_model_id__in=in_fleet)
            .select_related("device_model")
            .order_by("device_model__vendor", "device_model__name", "-memory_mib", "name")
        )
        self.fields["device_model"].queryset = DeviceModel.objects.filter(pk__in=in_fleet).order_by(
            "vendor", "name"
        )
        self.fields["request_template"].queryset = DeviceRequestTemplate.objects.order_by("name")
        for name in ALL_REQUEST_FIELDS:
            self.fields[name].widget.attrs["data-request-field"] = name

    @staticmethod
    def initial_from(job: Job) -> dict:
        """Initial values that submit a copy of ``job`` ("submit a similar job")."""
        hours = None
        if job.expected_duration_s:
            hours = (Decimal(job.expected_duration_s) / 3600).quantize(Decimal("0.01"))
        return {
            "project": job.project_id,
            "name": job.name,
            "kind": job.kind,
            "image": job.image,
            "command": shlex.join(str(part) for part in job.command or []),
            "env": "\n".join(f"{key}={value}" for key, value in (job.env or {}).items()),
            "runtime_requirement": job.runtime_requirement,
            "request_kind": job.request_kind,
            "template": job.template_id,
            "device_model": job.device_model_id,
            "count": job.count,
            "compute_units": job.compute_units,
            "memory_gib": job.memory_mib // 1024 if job.memory_mib else None,
            "allowed_vendors": list(job.allowed_vendors or []),
            "request_template": job.request_template_id,
            "workload_profile": job.workload_profile.key if job.workload_profile_id else None,
            "target_throughput": job.target_throughput,
            "target_latency_ms": job.target_latency_ms,
            "replicas": job.replicas,
            "priority_class": job.priority_class,
            "expected_duration_h": hours,
            "checkpoint_dir": job.checkpoint_dir,
            "max_retries": job.max_retries,
        }

    # ---- field cleaning --------------------------------------------------------------------------

    def clean_name(self) -> str:
        return self.cleaned_data["name"].strip()

    def clean_image(self) -> str:
        image = self.cleaned_data["image"].strip()
        if any(ch.isspace() for ch in image):
            raise forms.ValidationError(_("An image reference has no spaces."))
        return image

    def clean_count(self) -> int:
        return self.cleaned_data.get("count") or 1

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command") or ""
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(_("Cannot split the command: %(error)s.") % {"error": exc})

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        errors = []
        for number, raw in enumerate((self.cleaned_data.get("env") or "").splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or not ENV_KEY.match(key):
                errors.append(
                    _(
                        "Line %(number)s: expected KEY=VALUE with a key of letters, digits and _ (got %(line)s)."
                    )
                    % {"number": number, "line": line[:60]}
                )
            elif key in env:
                errors.append(_("Line %(number)s: %(key)s is set twice.") % {"number": number, "key": key})
            else:
                env[key] = value
        if errors:
            raise forms.ValidationError(errors)
        return env

    def clean_runtime_requirement(self) -> str:
        text = (self.cleaned_data.get("runtime_requirement") or "").strip()
        if text:
            try:
                compat.parse_requirement(text)
            except ValidationFailed as exc:
                raise forms.ValidationError(exc.message)
        return text

    def clean(self):
        cleaned = super().clean()
        kind = cleaned.get("request_kind")
        required = {
            Job.RequestKind.TEMPLATE: ("template", _("Choose a compute template.")),
            Job.RequestKind.WHOLE_CARDS: ("device_model", _("Choose a card model.")),
            Job.RequestKind.COMPUTE_UNITS: ("compute_units", _("Give a positive number of compute units.")),
            Job.RequestKind.REQUEST_TEMPLATE: ("request_template", _("Choose a device request template.")),
            Job.RequestKind.PROFILE: ("workload_profile", _("Choose a workload profile.")),
        }
        if kind in required:
            name, message = required[kind]
            if cleaned.get(name) in (None, "") and name not in self.errors:
                self.add_error(name, message)
        missing_target = kind == Job.RequestKind.PROFILE and cleaned.get("target_throughput") is None
        if missing_target and "target_throughput" not in self.errors:
            self.add_error("target_throughput", _("Give the throughput the job must reach."))
        unnamed = cleaned.get("kind") == Job.Kind.BENCHMARK and not cleaned.get("workload_profile")
        if unnamed and "workload_profile" not in self.errors:
            self.add_error("workload_profile", _("A benchmark run names the workload profile it measures."))
        return cleaned

    # ---- to the service --------------------------------------------------------------------------

    def request_values(self) -> dict:
        """The request part of the cleaned data, in service terms; only the chosen kind's fields.

        Works on a partly valid form too (the preview uses it while the user is still typing).
        """
        data = getattr(self, "cleaned_data", {})
        kind = data.get("request_kind") or Job.RequestKind.TEMPLATE
        values: dict = {
            "request_kind": kind,
            "replicas": data.get("replicas") or 1,
            "runtime_requirement": data.get("runtime_requirement") or "",
            "priority_class": data.get("priority_class") or PriorityClass.NORMAL,
        }
        used = REQUEST_FIELDS.get(kind, ())
        if "count" in used:
            values["count"] = data.get("count") or 1
        if "template" in used and data.get("template") is not None:
            values["template"] = data["template"]
        if "device_model" in used and data.get("device_model") is not None:
            values["device_model"] = data["device_model"]
        if "compute_units" in used:
            if data.get("compute_units") is not None:
                values["compute_units"] = data["compute_units"]
            if data.get("memory_gib"):
                values["memory_mib"] = data["memory_gib"] * 1024
        if "allowed_vendors" in used:
            values["allowed_vendors"] = list(data.get("allowed_vendors") or [])
        if "request_template" in used and data.get("request_template") is not None:
            values["request_template"] = data["request_template"]
        if "workload_profile" in used:
            for name in ("workload_profile", "target_throughput", "target_latency_ms"):
                if data.get(name) is not None:
                    values[name] = data[name]
        elif data.get("kind") == Job.Kind.BENCHMARK and data.get("workload_profile") is not None:
            values["workload_profile"] = data["workload_profile"]  # what a benchmark run measures
        return values

    def request_errors(self) -> dict[str, list[str]]:
        """Errors of the fields the request depends on (the preview cannot place without them)."""
        kind = self.data.get("request_kind") or Job.RequestKind.TEMPLATE
        names = {"request_kind", "replicas", "runtime_requirement", "priority_class", "project"}
        names |= set(REQUEST_FIELDS.get(kind, ()))
        return {name: errors for name, errors in self.errors.items() if name in names}

    def service_values(self) -> dict:
        """Keyword arguments for ``job_submit`` (without ``project``); call on a valid form only."""
        data = self.cleaned_data
        values = {
            "name": data["name"],
            "kind": data["kind"],
            "image": data["image"],
            "command": data["command"],
            "env": data["env"],
            "checkpoint_dir": (data.get("checkpoint_dir") or "").strip(),
            "max_retries": data["max_retries"],
            **self.request_values(),
        }
        hours = data.get("expected_duration_h")
        if hours is not None:
            values["expected_duration_s"] = int((hours * 3600).to_integral_value())
        return values

    def add_service_errors(self, message: str, details) -> None:
        """An ApplicationError (or a model ValidationError) as form errors, field errors on their fields."""
        shown = False
        if isinstance(details, dict):
            for key, errors in details.items():
                name = SERVICE_TO_FORM.get(key, key)
                errors = errors if isinstance(errors, (list, tuple)) else [errors]
                if name in self.fields:
                    for error in errors:
                        self.add_error(name, str(error))
                    shown = True
                else:
                    for error in errors:
                        if str(error) in message:
                            continue
                        prefix = "" if key in ("__all__", "request") else f"{key}: "
                        self.add_error(None, f"{prefix}{error}")
        if message and not (shown and message == "The request is invalid."):
            self.add_error(None, message)
