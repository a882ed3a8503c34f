"""How a job over several cards scales: the efficiency within a node (the card's link) and across nodes (the
nodes' network), a table of stated ASSUMPTIONS replaced by fits of the library's multi-card measurements,
and the instances a target then needs (``apps.benchlib.recommend`` ranks the options with them)."""

from __future__ import annotations

import math
from decimal import Decimal

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.benchlib.models import Measurement
from apps.catalog.models import ComputeTemplate, DeviceModel

# Scaling efficiency of a job over several cards: ASSUMPTIONS (conservative defaults, not measurements),
# shown on the page as such and replaced by a fit when the library holds multi-card measurements of the
# same profile on the same model. Within a node: the card's link; slices of cards talk over PCIe.
# Across nodes: a factor per doubling of the node count, by the nodes' network.
INTRA_NODE_EFFICIENCY = {
    "nvlink": Decimal("0.95"),
    "hccs": Decimal("0.95"),
    "xgmi": Decimal("0.90"),
    "mlulink": Decimal("0.90"),
    "pcie": Decimal("0.85"),
}
CROSS_NODE_EFFICIENCY = {
    "infiniband": Decimal("0.90"),
    "roce": Decimal("0.85"),
    "tcp": Decimal("0.60"),
}
LINK_LABELS = {
    "nvlink": "NVLink",
    "hccs": "HCCS",
    "xgmi": "xGMI",
    "mlulink": "MLU-Link",
    "pcie": "PCIe",
    "infiniband": "InfiniBand",
    "roce": "RoCE",
    "tcp": gettext_noop("Ethernet without RDMA"),
}
ASSUMED = "assumed"
FITTED = "measured"


def scaling_assumptions() -> list[dict]:
    """The efficiency table in force, for the page and the API (every entry is an assumption)."""
    return [
        {"link": _(LINK_LABELS[k]), "where": "intra-node", "efficiency": str(v)}
        for k, v in INTRA_NODE_EFFICIENCY.items()
    ] + [
        {"link": _(LINK_LABELS[k]), "where": "per doubling of nodes", "efficiency": str(v)}
        for k, v in CROSS_NODE_EFFICIENCY.items()
    ]


def intra_link(model: DeviceModel, template: ComputeTemplate | None) -> str:
    if template is not None:
        return "pcie"
    features = {str(f).lower() for f in model.features or []}
    return next((k for k in ("nvlink", "hccs", "xgmi", "mlulink") if k in features), "pcie")


def cross_link(nics_per_node: list[list]) -> str:
    """The worst network among the nodes (a job may land on any of them)."""
    rank = {"infiniband": 0, "roce": 1, "tcp": 2}
    worst = "infiniband" if nics_per_node else "tcp"
    for nics in nics_per_node:
        links = {str((n or {}).get("link", "")).lower() for n in nics or [] if isinstance(n, dict)}
        if any("roce" in x for x in links):
            link = "roce"
        elif any("infiniband" in x or x == "ib" for x in links):
            link = "infiniband"
        else:
            link = "tcp"
        if rank[link] > rank[worst]:
            worst = link
    return worst


def scaled_efficiency(n: int, nodes: int, intra: Decimal, cross: Decimal) -> Decimal:
    if n <= 1:
        return Decimal(1)
    eff = intra
    if nodes > 1:
        eff *= cross ** math.ceil(math.log2(nodes))
    return eff


def fit_intra(rows: list[Measurement], per_node: int | None) -> Decimal | None:
    """Intra-node efficiency fitted from measurements of several whole cards on one node against the
    single-card figure of the same profile and model (runs-weighted); None without both."""
    singles = [m for m in rows if m.trusted and m.cards == 1 and Decimal(m.compute_share) == 100]
    multi = [
        m
        for m in rows
        if m.trusted
        and m.cards > 1
        and Decimal(m.compute_share) == 100
        and (per_node is None or m.cards <= per_node)
    ]
    if not singles or not multi:
        return None
    single = sum((Decimal(m.throughput) * m.runs for m in singles), Decimal(0)) / sum(m.runs for m in singles)
    if single <= 0:
        return None
    ratio = sum((Decimal(m.throughput) / m.cards / single * m.runs for m in multi), Decimal(0)) / sum(
        m.runs for m in multi
    )
    return min(Decimal(1), ratio).quantize(Decimal("0.01"))


def fit_cross(rows: list[Measurement], per_node: int, intra: Decimal) -> Decimal | None:
    """The network's factor per doubling of nodes, fitted from whole-card measurements over more cards
    than one of the reader's nodes holds (so over ``ceil(cards / per_node)`` nodes): their per-card
    ratio to the single card is ``intra × cross ** ceil(log2 nodes)``. None without such measurements."""
    singles = [m for m in rows if m.trusted and m.cards == 1 and Decimal(m.compute_share) == 100]
    multi = [m for m in rows if m.trusted and m.cards > per_node and Decimal(m.compute_share) == 100]
    if not singles or not multi or intra <= 0:
        return None
    single = sum((Decimal(m.throughput) * m.runs for m in singles), Decimal(0)) / sum(m.runs for m in singles)
    if single <= 0:
        return None
    total, weight = Decimal(0), 0
    for m in multi:
        steps = math.ceil(math.log2(math.ceil(m.cards / per_node)))
        ratio = min(Decimal(1), Decimal(m.throughput) / m.cards / single / intra)
        if steps < 1 or ratio <= 0:
            continue
        total += Decimal(float(ratio) ** (1 / steps)) * m.runs
        weight += m.runs
    if not weight:
        return None
    return min(Decimal(1), total / weight).quantize(Decimal("0.01"))


def instances_needed(
    option, target: Decimal, memory_min: int, intra: Decimal, cross: Decimal, communicating: bool
):
    """(instances, efficiency) to reach ``target``: more cards → more nodes → lower efficiency → more cards."""
    instances = max(math.ceil(target / option.per_instance), memory_min)
    eff = Decimal(1)
    for _round in range(64):
        nodes = math.ceil(instances / option.per_node)
        eff = scaled_efficiency(instances, nodes, intra, cross) if communicating else Decimal(1)
        needed = max(math.ceil(target / (option.per_instance * eff)), memory_min)
        if needed <= instances:
            break
        instances = needed
    return instances, eff


def link_efficiency(
    option, intra_key: str, cross_key: str, fitted, rows, cards_per_node: int, communicating: bool
) -> tuple[Decimal, Decimal]:
    """(within a node, across nodes) scaling efficiency of ``option``: the assumed table, replaced by the
    fits of the library's multi-card measurements for whole cards (``option.efficiency_basis`` says which)."""
    whole = option.template is None
    intra = INTRA_NODE_EFFICIENCY[intra_key]
    if fitted is not None and whole:
        intra, option.efficiency_basis = fitted, FITTED
    else:
        option.efficiency_basis = ASSUMED
    cross = CROSS_NODE_EFFICIENCY[cross_key]
    fitted_cross = fit_cross(rows, cards_per_node, intra) if communicating and whole else None
    if fitted_cross is not None:
        cross, option.efficiency_basis = fitted_cross, FITTED
    return intra, cross
