"""Forms for the rollout pages: create a gray batch (with its nodes), act on a batch or a wave with a
reason, create an upgrade plan and add a wave to it.

The forms turn page inputs into the keyword arguments of ``apps.rollout.services``; the services
validate again and decide (stages, layers, retired nodes). Nodes are picked three ways that all scale
to a large fleet: ticked in the searchable, server-paged picker (``nodes``: ids), pasted by name
(``node_names``), or taken whole from a pool or a label selector (``pool``, ``label``).
"""

from __future__ import annotations

import re

from django import forms
from django.utils.text import slugify
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from apps.inventory.models import Node, Pool
from apps.rollout.models import BatchKind, BenchmarkRun, GrayBatch, SoakCriteria, UpgradePlan

REASON_MAX_LENGTH = 500  # GrayBatch.stage_reason
# Choices rendered in a select (validation always uses the whole queryset).
SHOWN_CHOICES = 200
# Errors that name nodes list at most this many.
NAMED = 20
LABEL_SELECTOR = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_./]*)=([-A-Za-z0-9_.]*)$")
NAME_SPLIT = re.compile(r"[\s,;]+")


def _reason_field() -> forms.CharField:
    return forms.CharField(
        label=_("Reason"),
        max_length=REASON_MAX_LENGTH,
        strip=True,
        error_messages={"required": _("Give a reason: it is kept with the audit record.")},
    )


def _limit_choices(field: forms.ModelChoiceField, rows, *, blank: bool) -> None:
    """Render only ``rows`` in the select; the field still validates against its whole queryset."""
    choices = [(row.pk, str(row)) for row in rows[:SHOWN_CHOICES]]
    field.widget.choices = ([("", "—")] if blank else []) + choices


class ReasonForm(forms.Form):
    """A stage change of a batch or a wave: the reason goes to the audit record."""

    reason = _reason_field()


class NodeReleaseForm(forms.Form):
    """Release a node of a rolled-back batch from quarantine; the reason goes to the ledger history."""

    node = forms.IntegerField()
    reason = forms.CharField(max_length=300, strip=True)


class BatchCreateForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, strip=True)
    slug = forms.CharField(
        label=_("Slug"),
        max_length=60,
        required=False,
        strip=True,
        help_text=_(
            "The suanchi.io/gray label value on the nodes: letters, digits, hyphens. Empty: made from the name."
        ),
    )
    kind = forms.ChoiceField(label=_("Kind"), choices=BatchKind.choices)
    target_version = forms.CharField(label=_("Target version"), max_length=100, strip=True)
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    criteria = forms.ModelChoiceField(
        label=_("Soak criteria"), queryset=SoakCriteria.objects.order_by("name")
    )
    baseline_run = forms.ModelChoiceField(
        label=_("Baseline benchmark run"),
        queryset=BenchmarkRun.objects.select_related("node").order_by("-measured_at", "-pk"),
        required=False,
        help_text=_("Needed when the criteria limit the throughput drop."),
    )
    plan = forms.ModelChoiceField(
        label=_("Upgrade plan"),
        queryset=UpgradePlan.objects.order_by("-created_at", "-pk"),
        required=False,
        help_text=_("Optional: the batch becomes the plan's wave of its layer."),
    )
    nodes = forms.ModelMultipleChoiceField(
        queryset=Node.objects.all(), required=False, widget=forms.MultipleHiddenInput
    )
    node_names = forms.CharField(
        label=_("Node names"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono", "spellcheck": "false"}),
        help_text=_(
            "One per line or separated by commas; write cluster/name where a name is in two clusters."
        ),
    )
    pool = forms.ModelChoiceField(
        label=_("Every node of a pool"),
        queryset=Pool.objects.select_related("cluster").order_by("cluster__name", "name"),
        required=False,
        empty_label="—",
    )
    label = forms.CharField(
        label=_("Every node with a label"),
        max_length=200,
        required=False,
        strip=True,
        help_text=_("key=value, e.g. suanchi.io/rack=r12"),
    )
    reason = _reason_field()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _limit_choices(self.fields["baseline_run"], self.fields["baseline_run"].queryset, blank=True)
        _limit_choices(self.fields["plan"], self.fields["plan"].queryset, blank=True)

    def clean_slug(self) -> str:
        slug = self.cleaned_data.get("slug") or slugify(self.data.get("name", "").replace(".", "-"))[
            :60
        ].strip("-")
        if not slug:
            raise forms.ValidationError(
                gettext("Give a slug (letters, digits and hyphens): it cannot be made from this name.")
            )
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", slug):
            raise forms.ValidationError(
                gettext(
                    "A slug has lower-case letters, digits and hyphens and starts and ends with one of them."
                )
            )
        return slug

    def clean_label(self) -> tuple[str, str] | None:
        text = self.cleaned_data.get("label") or ""
        if not text:
            return None
        match = LABEL_SELECTOR.match(text)
        if not match:
            raise forms.ValidationError(gettext("Write the label as key=value."))
        return match.group(1), match.group(2)

    def _nodes_by_name(self, text: str) -> list[Node]:
        names = [n for n in NAME_SPLIT.split(text) if n]
        found: list[Node] = []
        plain = sorted({n for n in names if "/" not in n})
        qualified = sorted({n for n in names if "/" in n})
        by_name: dict[str, list[Node]] = {}
        for node in Node.objects.filter(name__in=plain).select_related("cluster"):
            by_name.setdefault(node.name, []).append(node)
        unknown = [n for n in plain if n not in by_name]
        ambiguous = [n for n in plain if len(by_name.get(n, [])) > 1]
        found += [rows[0] for n, rows in by_name.items() if len(rows) == 1]
        for item in qualified:
            cluster, _sep, name = item.partition("/")
            node = Node.objects.filter(name=name, cluster__slug=cluster).first()
            if node is None:
                unknown.append(item)
            else:
                found.append(node)
        if unknown:
            self.add_error(
                "node_names",
                gettext("No node named %(names)s.") % {"names": ", ".join(unknown[:NAMED])}
                + (
                    gettext(" (and %(more)s more)") % {"more": len(unknown) - NAMED}
                    if len(unknown) > NAMED
                    else ""
                ),
            )
        if ambiguous:
            self.add_error(
                "node_names",
                gettext("%(names)s: in more than one cluster; write cluster/name.")
                % {"names": ", ".join(ambiguous[:NAMED])},
            )
        return found

    def clean(self) -> dict:
        data = super().clean()
        picked: dict[int, Node] = {n.pk: n for n in data.get("nodes") or []}
        if data.get("node_names"):
            picked.update((n.pk, n) for n in self._nodes_by_name(data["node_names"]))
        if data.get("pool"):
            picked.update((n.pk, n) for n in Node.objects.filter(pool=data["pool"]))
        if data.get("label"):
            key, value = data["label"]
            matching = list(Node.objects.filter(labels__contains={key: value}))
            if not matching:
                self.add_error(
                    "label", gettext("No node has the label %(label)s.") % {"label": f"{key}={value}"}
                )
            picked.update((n.pk, n) for n in matching)
        if not picked and not self.errors:
            raise forms.ValidationError(
                gettext(
                    "Pick at least one node: tick them in the search, paste their names, or choose a pool or a label."
                )
            )
        data["picked_nodes"] = sorted(picked.values(), key=lambda n: n.name)
        return data

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "slug": data["slug"],
            "kind": data["kind"],
            "target_version": data["target_version"],
            "description": data.get("description") or "",
            "criteria": data["criteria"],
            "baseline_run": data.get("baseline_run"),
            "nodes": data["picked_nodes"],
            "reason": data["reason"],
        }


class PlanCreateForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, strip=True)
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    reason = _reason_field()


class WaveCreateForm(forms.Form):
    """Add a batch to a plan as the wave of its layer (the layer follows the batch's kind)."""

    plan = forms.ModelChoiceField(
        label=_("Upgrade plan"), queryset=UpgradePlan.objects.order_by("-created_at", "-pk")
    )
    batch = forms.ModelChoiceField(
        label=_("Gray batch"),
        queryset=GrayBatch.objects.filter(wave__isnull=True).order_by("-created_at", "-pk"),
        help_text=_("Batches not yet in a wave."),
    )
    reason = _reason_field()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _limit_choices(self.fields["plan"], self.fields["plan"].queryset, blank=False)
        _limit_choices(self.fields["batch"], self.fields["batch"].queryset, blank=False)
