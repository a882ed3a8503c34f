"""The scheduler's explanation ("0/9 nodes are available: 6 insufficient free cards, 3 node
quarantined.") in the reader's language.

The engine (apps/scheduling/engine/) stays free of Django and writes its explanation in English
(``filters.explain_counts``, kube-scheduler's wording); it lands in ``Job.state_reason`` and the trace.
This module registers that sentence as stored texts (apps.core.stored_text): the frame with one to
twelve counted reasons, and each counted reason of ``engine/filters.py``, so ``|localized`` shows it
translated. tests/core/test_zh_pages.py checks every reason of the engine is registered here.
``no {}`` is not registered as such ("%(count)s no %(detail)s" would match unrelated texts): its
filled forms are (``NO_DEVICE``: "no gpu of model …", "no npu from …", "no gpu"), and so is each
reason alone, as the submit preview lists them per node (``NODE_REASONS``).
"""

from __future__ import annotations

import re

from django.utils.translation import gettext_lazy, pgettext_lazy

from apps.core.stored_text import stored, stored_vocabulary
from apps.scheduling.engine.filters import POOL_RESERVED

FRAMES = (
    stored("%(available)s/%(total)s nodes are available."),
    stored("%(available)s/%(total)s nodes are available: %(a)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s."),
    # A mixed fleet gives more reasons than four (each vendor's taint, each model missing).
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s."),
    stored(
        "%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s, %(h)s."
    ),
    stored(
        "%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s, %(h)s, %(i)s."
    ),
    stored(
        "%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s, %(h)s, %(i)s, %(j)s."
    ),
    stored(
        "%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s, %(h)s, %(i)s, %(j)s, %(k)s."
    ),
    stored(
        "%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s, %(e)s, %(f)s, %(g)s, %(h)s, %(i)s, %(j)s, %(k)s, %(l)s."
    ),
)

# "%(count)s " + each reason of engine/filters.py ("{}" → "%(detail)s").
COUNTED_REASONS = (
    stored("%(count)s node not ready"),
    stored("%(count)s node in maintenance"),
    stored("%(count)s node quarantined"),
    stored("%(count)s node draining"),
    stored("%(count)s node retired"),
    stored("%(count)s node not in the requested pool"),
    stored("%(count)s node in another cluster"),
    stored("%(count)s pool reserved for another project"),
    stored("%(count)s node reserved for another project"),
    stored("%(count)s node selector mismatch"),
    stored("%(count)s untolerated taint %(detail)s"),
    stored("%(count)s runtime precheck failed: %(detail)s"),
    stored("%(count)s missing required feature %(detail)s"),
    stored("%(count)s card memory below request"),
    stored("%(count)s matching devices unhealthy or not schedulable"),
    stored("%(count)s matching devices are on gray-release soak (the job did not opt in)"),
    stored("%(count)s matching devices reserved for another project"),
    stored("%(count)s too few matching devices"),
    stored("%(count)s insufficient cpu"),
    stored("%(count)s insufficient memory"),
    stored("%(count)s insufficient free cards"),
    stored("%(count)s insufficient device memory"),
    stored("%(count)s insufficient device compute"),
    stored("%(count)s insufficient free devices"),
    stored("%(count)s no free MIG placement for %(detail)s"),
)
LEFT_IN_ENGLISH = ("no {}", "no switch domain can host every part")

# "no {}" as the engine fills it (``filters._what``: a device kind, "of model a|b" or "from v|w"), each
# with a literal anchor so that the pattern cannot take an unrelated text; the models and vendors are
# identifiers, shown as written.
NO_DEVICE = (
    stored("%(count)d no %(kind)s of model %(user_models)s"),
    stored("%(count)d no %(kind)s from %(user_vendors)s"),
    stored("no %(kind)s of model %(user_models)s"),
    stored("no %(kind)s from %(user_vendors)s"),
    stored("%(count)d no gpu"),
    stored("%(count)d no npu"),
    stored("%(count)d no dcu"),
    stored("%(count)d no mlu"),
    stored("%(count)d no device"),
    stored("no gpu"),
    stored("no npu"),
    stored("no dcu"),
    stored("no mlu"),
    stored("no device"),
    stored("%(count)d no switch domain can host every part"),
)
DEVICE_KINDS = (  # as the engine writes them in English; GPU, NPU, … in Chinese
    ("gpu", gettext_lazy("gpu")),
    ("npu", gettext_lazy("npu")),
    ("dcu", gettext_lazy("dcu")),
    ("mlu", gettext_lazy("mlu")),
    ("hpu", gettext_lazy("hpu")),
    ("gcu", gettext_lazy("gcu")),
    ("device", gettext_lazy("device")),
)
stored_vocabulary(DEVICE_KINDS)

# One node's reason alone (the submit preview's per-node reasons, ``Decision.rejections``).
NODE_REASONS = (
    stored("node not ready"),
    stored("node in maintenance"),
    stored("node quarantined"),
    stored("node draining"),
    stored("node retired"),
    stored("node not in the requested pool"),
    stored("node in another cluster"),
    stored("pool reserved for another project"),
    stored("node reserved for another project"),
    stored("node selector mismatch"),
    stored("untolerated taint %(detail)s"),
    stored("runtime precheck failed: %(detail)s"),
    stored("missing required feature %(detail)s"),
    stored("card memory below request"),
    stored("matching devices unhealthy or not schedulable"),
    stored("matching devices are on gray-release soak (the job did not opt in)"),
    stored("matching devices reserved for another project"),
    stored("too few matching devices"),
    stored("insufficient cpu"),
    stored("insufficient memory"),
    stored("insufficient free cards"),
    stored("insufficient device memory"),
    stored("insufficient device compute"),
    stored("insufficient free devices"),
    stored("no free MIG placement for %(detail)s"),
    stored("no switch domain can host every part"),
)

# The other explanations and trace steps of engine/engine.py and engine/clusters.py (their English
# wording, "{x}" → "%(x)s"); tests/core/test_zh_pages.py checks each reads in Chinese.
EXPLANATIONS = (
    stored("request %(id)s is already placed"),
    stored("gang of %(replicas)s replicas: only %(placed)s fit. %(detail)s"),
    stored("gang of %(replicas)s replicas: only %(placed)s fit"),
    stored("%(detail)s Fallback %(level)s: no switch domain can host every part."),
    stored("no single cluster can hold the whole job (a job never spans clusters): %(failures)s"),
    stored("no node fits"),
    stored("does not fit"),
)
STEPS = (
    stored("%(eligible)s/%(total)s nodes pass the static filters"),
    stored("placed on %(nodes)s"),
    stored("placed on %(nodes)s (cross-node)"),
    stored("policy %(policy)s: %(node)s scores %(score)s"),
    stored("all %(replicas)s replicas fit on switch %(domain)s"),
    stored("all %(replicas)s replicas fit on any nodes"),
    stored("only %(placed)s/%(replicas)s replicas fit; gang not placed (all or nothing)"),
    stored("no single node holds every group; trying %(level)s"),
    stored("placed across %(count)s node(s) under switch %(domain)s; marked cross-node"),
    stored("placed across %(count)s node(s) under any nodes; marked cross-node"),
    # engine/clusters.py: the cluster chosen, why, and the clusters that could not hold the job
    stored("cluster %(cluster)s: preference %(preference)s"),
    stored(
        "cluster %(cluster)s: preference %(preference)s; best policy score among feasible clusters of that "
        "preference (%(others)s)"
    ),
    stored("cluster %(cluster)s: preference %(preference)s; not feasible: %(failures)s"),
    stored(
        "cluster %(cluster)s: preference %(preference)s; best policy score among feasible clusters of that "
        "preference (%(others)s); not feasible: %(failures)s"
    ),
)

# The tier of each trace step (``TraceStep.tier``), shown as a tag beside the step.
TRACE_TIERS = (
    ("filter", pgettext_lazy("trace step", "filter")),
    ("score", pgettext_lazy("trace step", "score")),
    ("assign", pgettext_lazy("trace step", "assign")),
    ("gang", pgettext_lazy("trace step", "gang")),
    ("fallback", pgettext_lazy("trace step", "fallback")),
    ("cluster", pgettext_lazy("trace step", "cluster")),
    ("quota", pgettext_lazy("trace step", "quota")),
    ("library", pgettext_lazy("trace step", "library")),
    ("result", pgettext_lazy("trace step", "result")),
)
stored_vocabulary(TRACE_TIERS)

# How tightly a placement's cards are coupled (``engine.assign.Topology``), the tag beside each placed
# node on the job page (not a vocabulary: "unknown" is too common a word to translate everywhere).
TOPOLOGY_LABELS = {
    "single-device": gettext_lazy("single card"),
    "nvlink-clique": gettext_lazy("one high-speed link group"),
    "pcie-switch": gettext_lazy("same PCIe switch"),
    "same-numa": gettext_lazy("same NUMA node"),
    "cross-numa": gettext_lazy("across NUMA nodes"),
    "unknown": gettext_lazy("coupling unknown"),
}


# -- what a member may read ------------------------------------------------------------------------
# The engine counts every node of the fleet; a member does not see the nodes of pools reserved for
# other projects (apps.inventory.selectors._node_visibility), so "0/10 nodes … 1 pool reserved for
# another project" beside a node list of 9 would count what they cannot see (issue 29 §9).
HIDDEN_FROM_MEMBERS = (POOL_RESERVED,)
_COUNTED = re.compile(r"(?P<available>\d+)/(?P<total>\d+) nodes are available(?:: (?P<body>.*))?\.$", re.S)


def explanation_for_reader(text: str, *, staff: bool) -> str:
    """The engine's English explanation as ``explain_counts`` wrote it, without the nodes a member
    cannot see (their reasons dropped, the total lowered by their count). Staff read it whole; text
    without the counted frame is returned as it is."""
    if staff or not text:
        return text
    match = _COUNTED.search(text)
    if match is None:
        return text
    parts = re.split(r", (?=\d+ )", match["body"]) if match["body"] else []
    kept, hidden = [], 0
    for part in parts:
        count, _space, reason = part.partition(" ")
        if count.isdigit() and reason in HIDDEN_FROM_MEMBERS:
            hidden += int(count)
        else:
            kept.append(part)
    if not hidden:
        return text
    total = int(match["total"]) - hidden
    frame = f"{match['available']}/{total} nodes are available" + (f": {', '.join(kept)}." if kept else ".")
    return text[: match.start()] + frame
