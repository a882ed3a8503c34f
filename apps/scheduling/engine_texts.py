"""The scheduler's explanation ("0/9 nodes are available: 6 insufficient free cards, 3 node
quarantined.") in the reader's language.

The engine (apps/scheduling/engine/) stays free of Django and writes its explanation in English
(``filters.explain_counts``, kube-scheduler's wording); it lands in ``Job.state_reason`` and the trace.
This module registers that sentence as stored texts (apps.core.stored_text): the frame with one to
four counted reasons, and each counted reason of ``engine/filters.py``, so ``|localized`` shows it
translated. tests/core/test_zh_pages.py checks every reason of the engine is registered here.
Two reasons are left in English on purpose: ``no {}`` and the switch-domain sentence, whose
patterns would be too loose ("%(count)s no %(detail)s" would match unrelated texts).
"""

from __future__ import annotations

from django.utils.translation import pgettext_lazy

from apps.core.stored_text import stored, stored_vocabulary

FRAMES = (
    stored("%(available)s/%(total)s nodes are available."),
    stored("%(available)s/%(total)s nodes are available: %(a)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s."),
    stored("%(available)s/%(total)s nodes are available: %(a)s, %(b)s, %(c)s, %(d)s."),
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
