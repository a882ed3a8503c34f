"""GET filter forms for the ledger pages.

Every choice list comes from the user's scoped selectors, so a filter never reveals a cluster, pool
or node the user cannot see. Parameter names follow the REST API (``search``, ``vendor``,
``device_model``, ``node`` ...) so the export links can pass the page's filters through unchanged.
"""

from __future__ import annotations

from django import forms
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import DeviceModel, Vendor
from apps.inventory import selectors
from apps.inventory.models import Device, Node


def _with_blank(label, choices) -> list[tuple[str, str]]:
    return [("", label), *choices]


class _NodeChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Node) -> str:
        return f"{obj.cluster.name} / {obj.name}"


class FilterForm(forms.Form):
    """A GET form that filters a queryset with whatever of its fields are valid."""

    def __init__(self, data=None, *, user, **kwargs):
        # An unbound form when nothing was submitted keeps "is_valid" meaningful for the template.
        super().__init__(data if data else None, **kwargs)
        self.user = user

    @property
    def values(self) -> dict:
        if not self.is_bound:
            return {}
        self.is_valid()
        return {key: value for key, value in self.cleaned_data.items() if value not in (None, "", False)}

    @property
    def active(self) -> bool:
        return bool(self.values)

    def filter(self, qs: QuerySet) -> QuerySet:  # pragma: no cover - overridden
        raise NotImplementedError


class NodeFilterForm(FilterForm):
    search = forms.CharField(
        label=_("Search"),
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": _("Node name"), "type": "search"}),
    )
    cluster = forms.ModelChoiceField(label=_("Cluster"), queryset=None, required=False, empty_label=_("All"))
    pool = forms.ModelChoiceField(label=_("Pool"), queryset=None, required=False, empty_label=_("All"))
    status = forms.ChoiceField(label=_("Status"), required=False, choices=())
    vendor = forms.ChoiceField(label=_("Vendor"), required=False, choices=())

    def __init__(self, data=None, *, user, **kwargs):
        super().__init__(data, user=user, **kwargs)
        self.fields["cluster"].queryset = selectors.cluster_list(user=user)
        self.fields["pool"].queryset = selectors.pool_list(user=user)
        self.fields["status"].choices = _with_blank(_("All"), Node.Status.choices)
        self.fields["vendor"].choices = _with_blank(_("All"), Vendor.choices)

    def filter(self, qs: QuerySet[Node]) -> QuerySet[Node]:
        values = self.values
        if "search" in values:
            qs = qs.filter(name__icontains=values["search"].strip())
        if "cluster" in values:
            qs = qs.filter(cluster=values["cluster"])
        if "pool" in values:
            qs = qs.filter(pool=values["pool"])
        if "status" in values:
            qs = qs.filter(status=values["status"])
        if "vendor" in values:
            # Nodes carrying at least one card of that vendor that the user can see.
            with_vendor = selectors.device_list(user=self.user).filter(vendor=values["vendor"])
            qs = qs.filter(pk__in=with_vendor.values("node_id"))
        return qs


class DeviceFilterForm(FilterForm):
    search = forms.CharField(
        label=_("Search"),
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": _("UUID, serial or node"), "type": "search"}),
    )
    vendor = forms.ChoiceField(label=_("Vendor"), required=False, choices=())
    device_model = forms.ModelChoiceField(
        label=_("Model"), queryset=None, required=False, empty_label=_("All")
    )
    health = forms.ChoiceField(label=_("Health"), required=False, choices=())
    pool_status = forms.ChoiceField(label=_("Pool status"), required=False, choices=())
    node = _NodeChoiceField(label=_("Node"), queryset=None, required=False, empty_label=_("All"))
    unrecognized = forms.BooleanField(label=_("Unrecognized models only"), required=False)

    def __init__(self, data=None, *, user, **kwargs):
        super().__init__(data, user=user, **kwargs)
        visible_models = selectors.device_list(user=user).filter(device_model__isnull=False)
        self.fields["device_model"].queryset = DeviceModel.objects.filter(
            pk__in=visible_models.values("device_model_id")
        ).order_by("vendor", "name")
        self.fields["node"].queryset = (
            selectors.node_list(user=user)
            .select_related(None)
            .select_related("cluster")
            .only("pk", "name", "cluster__name")
        )
        self.fields["vendor"].choices = _with_blank(_("All"), Vendor.choices)
        self.fields["health"].choices = _with_blank(_("All"), Device.Health.choices)
        self.fields["pool_status"].choices = _with_blank(_("All"), Device.PoolStatus.choices)

    def filter(self, qs: QuerySet[Device]) -> QuerySet[Device]:
        values = self.values
        if "search" in values:
            term = values["search"].strip()
            qs = qs.filter(
                Q(uuid__icontains=term) | Q(serial__icontains=term) | Q(node__name__icontains=term)
            )
        for name in ("vendor", "device_model", "health", "pool_status", "node"):
            if name in values:
                qs = qs.filter(**{name: values[name]})
        if values.get("unrecognized"):
            qs = qs.filter(model_unrecognized=True)
        return qs
