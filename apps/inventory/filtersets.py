"""One FilterSet per model, shared by the API and the pages.

A page filters with its model's FilterSet through ``apps.core.filters.page_filter``. The node and
device pages pick clusters, pools, nodes and models by id from selects whose choices come from the
user's scoped selectors (a filter never reveals what the user cannot see; an invisible id is a field
error), where the API takes slugs, names and lists: the ``...PageFilterSet`` subclasses redefine
those filters under the page's parameter names and the API's FilterSets stay as they are.
"""

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.catalog.models import DeviceModel, Vendor
from apps.core.filters import FilterSet, Int64ModelChoiceField, IsoDateTimeFilter, name_search_filter
from apps.inventory import selectors
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, NodeReport, Pool


class PoolFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__slug")

    class Meta:
        model = Pool
        fields = ["cluster"]


class NodeFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__slug")
    pool = django_filters.CharFilter(field_name="pool__slug")
    status = django_filters.MultipleChoiceFilter(choices=Node.Status.choices)
    vendor = django_filters.ChoiceFilter(choices=Vendor.choices, method="filter_vendor")
    q = django_filters.CharFilter(method="filter_q", label="search")

    class Meta:
        model = Node
        fields = ["cluster", "pool", "status", "cpu_arch", "driver_version", "cann_version", "rack", "switch"]

    def filter_vendor(self, queryset, name, value):
        # Nodes carrying at least one card of that vendor that the user can see: a card in another
        # project's pool on a shared node does not make the node match (nor reveal its vendor).
        user = getattr(self.request, "user", None)
        devices = selectors.device_list(user=user) if user is not None else Device.objects.all()
        return queryset.filter(pk__in=devices.filter(vendor=value).values("node_id"))

    def filter_q(self, queryset, name, value):
        return queryset.filter(
            Q(name__icontains=value) | Q(devices__uuid__iexact=value) | Q(devices__serial__iexact=value)
        ).distinct()


def _user(request):
    return getattr(request, "user", None)


def _visible_clusters(request):
    user = _user(request)
    return selectors.cluster_list(user=user) if user is not None else Cluster.objects.none()


def _visible_pools(request):
    user = _user(request)
    return selectors.pool_list(user=user) if user is not None else Pool.objects.none()


def _visible_nodes(request):
    user = _user(request)
    if user is None:
        return Node.objects.none()
    return (
        selectors.node_list(user=user)
        .select_related(None)
        .select_related("cluster")
        .only("pk", "name", "cluster__name")
    )


def _visible_device_models(request):
    user = _user(request)
    if user is None:
        return DeviceModel.objects.none()
    visible = selectors.device_list(user=user).filter(device_model__isnull=False)
    return DeviceModel.objects.filter(pk__in=visible.values("device_model_id")).order_by("vendor", "name")


# Up to this many visible nodes the device page picks its node from a drop-down; a larger fleet
# (10,000 nodes: issue 20) gets a text box taking the node's id, its name or "cluster / name".
NODE_SELECT_MAX = 200


class _NodeField(Int64ModelChoiceField):
    """A visible node by id (the links from the node and device pages) or by its label or name."""

    def label_from_instance(self, obj: Node) -> str:
        return f"{obj.cluster.name} / {obj.name}"

    def to_python(self, value):
        text = "" if value in self.empty_values else str(value).strip()
        if not text or text.isdigit():
            node = super().to_python(value)
        else:
            cluster, sep, name = text.rpartition(" / ")
            found = self.queryset.filter(name=name)
            if sep:
                found = found.filter(cluster__name=cluster)
            found = list(found[:2])
            if len(found) != 1:  # unknown, invisible, or a name several clusters use
                raise ValidationError(
                    self.error_messages["invalid_choice"], code="invalid_choice", params={"value": text}
                )
            node = found[0]
        self._resolved = (value, node)
        return node

    def prepare_value(self, value):
        if not isinstance(self.widget, forms.TextInput) or value in self.empty_values:
            return super().prepare_value(value)
        resolved = getattr(self, "_resolved", (None, None))
        if isinstance(value, Node):
            return self.label_from_instance(value)
        if resolved[0] == value and resolved[1] is not None:
            return self.label_from_instance(resolved[1])
        return value


class _NodeChoiceFilter(django_filters.ModelChoiceFilter):
    field_class = _NodeField


def _search(placeholder):
    return forms.TextInput(attrs={"placeholder": placeholder, "type": "search"})


class NodePageFilterSet(NodeFilterSet):
    """The node list page: name search, the user's clusters and pools by id, one status."""

    search = name_search_filter(_("Node name"))
    cluster = django_filters.ModelChoiceFilter(
        queryset=_visible_clusters, label=_("Cluster"), empty_label=_("All")
    )
    pool = django_filters.ModelChoiceFilter(queryset=_visible_pools, label=_("Pool"), empty_label=_("All"))
    status = django_filters.ChoiceFilter(choices=Node.Status.choices, label=_("Status"), empty_label=_("All"))
    vendor = django_filters.ChoiceFilter(
        choices=Vendor.choices, method="filter_vendor", label=_("Vendor"), empty_label=_("All")
    )


class DeviceFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="node__cluster__slug")
    pool = django_filters.CharFilter(field_name="node__pool__slug")
    node = django_filters.CharFilter(method="filter_node", help_text="node name or id")
    node_id = django_filters.NumberFilter(field_name="node_id")
    vendor = django_filters.MultipleChoiceFilter(choices=Vendor.choices)
    model = django_filters.CharFilter(field_name="device_model__slug")
    device_model = django_filters.NumberFilter(field_name="device_model_id")
    unrecognized = django_filters.BooleanFilter(field_name="model_unrecognized", method="filter_unrecognized")
    health = django_filters.MultipleChoiceFilter(choices=Device.Health.choices)
    pool_status = django_filters.MultipleChoiceFilter(choices=Device.PoolStatus.choices)
    owner_project = django_filters.CharFilter(field_name="owner_project__slug")
    uuid = django_filters.CharFilter(field_name="uuid", lookup_expr="iexact")
    serial = django_filters.CharFilter(field_name="serial", lookup_expr="iexact")
    q = django_filters.CharFilter(method="filter_q", label="search")

    class Meta:
        model = Device
        fields = ["cluster", "pool", "node", "vendor", "model", "health", "pool_status", "model_unrecognized"]

    def filter_node(self, queryset, name, value):
        if value.isdigit():
            return queryset.filter(Q(node_id=int(value)) | Q(node__name=value))
        return queryset.filter(node__name=value)

    def filter_unrecognized(self, queryset, name, value):
        return queryset.filter(model_unrecognized=True) if value else queryset

    def filter_q(self, queryset, name, value):
        return queryset.filter(
            Q(uuid__icontains=value)
            | Q(serial__icontains=value)
            | Q(node__name__icontains=value)
            | Q(pci_bus_id__icontains=value)
        )


class DevicePageFilterSet(DeviceFilterSet):
    """The device list page: search, one vendor / health / pool status, the user's nodes and models
    by id, and a checkbox for unrecognized models. Its query string also suits the export endpoint
    (``search`` is the API's search parameter there)."""

    search = django_filters.CharFilter(
        method="filter_q", label=_("Search"), max_length=100, widget=_search(_("UUID, serial or node"))
    )
    vendor = django_filters.ChoiceFilter(choices=Vendor.choices, label=_("Vendor"), empty_label=_("All"))
    device_model = django_filters.ModelChoiceFilter(
        queryset=_visible_device_models, label=_("Model"), empty_label=_("All")
    )
    health = django_filters.ChoiceFilter(
        choices=Device.Health.choices, label=_("Health"), empty_label=_("All")
    )
    pool_status = django_filters.ChoiceFilter(
        choices=Device.PoolStatus.choices, label=_("Pool status"), empty_label=_("All")
    )
    node = _NodeChoiceFilter(queryset=_visible_nodes, label=_("Node"), empty_label=_("All"))
    unrecognized = django_filters.BooleanFilter(
        method="filter_unrecognized", label=_("Unrecognized models only"), widget=forms.CheckboxInput
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        node = self.filters["node"]
        if node.get_queryset(self.request).count() > NODE_SELECT_MAX:
            node.extra["widget"] = _search(_("Node name or cluster / name"))


class DeviceEventFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    device = django_filters.NumberFilter(field_name="device_id")
    kind = django_filters.MultipleChoiceFilter(choices=DeviceEvent.Kind.choices)
    severity = django_filters.MultipleChoiceFilter(choices=DeviceEvent.Severity.choices)
    since = IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = DeviceEvent
        fields = ["node", "device", "kind", "severity"]


class NodeReportFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    kind = django_filters.ChoiceFilter(choices=NodeReport.Kind.choices)

    class Meta:
        model = NodeReport
        fields = ["node", "kind"]
