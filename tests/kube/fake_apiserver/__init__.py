"""A fake Kubernetes API server for the test suite.

A threaded HTTP server on 127.0.0.1 (ephemeral port) that speaks the parts of the Kubernetes REST
API Suanchi uses, with real semantics, so the OFFICIAL ``kubernetes`` client can talk to it through
a generated kubeconfig (:func:`kubeconfig_for`).

Implemented
-----------
Kinds: core/v1 ``namespaces``, ``nodes`` (cluster-scoped), ``pods``, ``resourcequotas``, ``events`` (namespaced);
batch/v1 ``jobs``; apps/v1 ``deployments``, ``daemonsets``; resource.k8s.io/v1 ``resourceslices``,
``deviceclasses`` (cluster-scoped), ``resourceclaims``, ``resourceclaimtemplates``; authorization.k8s.io/v1 ``selfsubjectaccessreviews`` (create only,
answered from :attr:`FakeApiServer.rbac_denied`); ``GET /version`` (:attr:`FakeApiServer.git_version`).

Verbs:

- list: ``GET`` on the collection (namespaced, or across all namespaces for namespaced kinds), with
  ``labelSelector`` (``a=b``, ``a==b``, ``a!=b``, ``a`` (exists), ``!a`` (absent), set-based
  ``a in (x,y)`` / ``a notin (x,y)``, comma-separated = AND; bad keys/values 400) and
  ``fieldSelector`` on ``metadata.name`` / ``metadata.namespace`` (``=``, ``==``, ``!=``). Returns a
  ``<Kind>List`` with ``metadata.resourceVersion`` whose items carry no ``kind`` / ``apiVersion``;
  ``limit`` / ``continue`` paging from a consistent snapshot, 410 Expired for a token older than
  :meth:`~FakeApiServer.compact`.
- watch: ``GET`` on the collection with ``watch=true`` / ``watch=1`` (every listed kind), as
  https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes and
  #semantics-for-watch define: a chunked stream (HTTP/1.1 ``Transfer-Encoding: chunked``) of JSON
  lines ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` in resourceVersion order.
  ``resourceVersion`` N: every change after N, replayed from a bounded history (the apiserver's watch
  cache, :attr:`~FakeApiServer.watch_history_size` events; :meth:`~FakeApiServer.compact` empties it),
  a version older than the history answers one ERROR event with a 410 Expired Status (``too old
  resource version: N (M)``) and ends; unset or ``"0"``: synthetic ADDED events for every object at
  the current version, then the changes. ``labelSelector`` / ``fieldSelector`` filter the objects;
  an object that stops matching arrives as DELETED (its previous state), one that starts as ADDED.
  ``timeoutSeconds`` ends the stream; ``allowWatchBookmarks=true`` adds BOOKMARK events (only
  ``kind``, ``apiVersion`` and ``metadata.resourceVersion``) when the real watch cache sends them:
  none after the replay, one 2 s before the deadline, else once a minute (see
  :func:`next_bookmark_time`). ``sendInitialEvents`` is not implemented (400).
  :attr:`~FakeApiServer.header_delay_s` holds back the response headers of lists and watches.
- get: ``GET`` on an item (and on ``.../status``).
- create: ``POST``; 409 ``AlreadyExists`` on duplicates; 404 ``NotFound`` when the namespace of a
  namespaced object does not exist, 403 when it is Terminating (NamespaceLifecycle); 400
  ``BadRequest`` when the body is not an object of that kind or the namespace in the body disagrees
  with the path; 422 ``Invalid`` with ``details.causes`` (see :meth:`FakeApiServer._validate`):
  names (DNS-1123 subdomain, label for Namespaces), label keys/values, a Job's template labels (so a
  Job name over 63 characters), ``restartPolicy`` (OnFailure/Never for Jobs), container resources
  (extended resources integers with requests == limits), unique taint key+effect on Nodes, pod DRA
  claim references, and resource.k8s.io/v1 claims, templates, classes and slices (CEL selectors
  compiled by the fake's subset, see :func:`cel_compile`). Defaults: ``restartPolicy: Always``,
  pod requests from limits, DRA ``allocationMode: ExactCount`` / ``count: 1``. Error texts name
  the group as kube-apiserver does (``Job.batch "x" is invalid``, ``jobs.batch "x" not found``).
- delete: ``DELETE`` with ``propagationPolicy`` (query or DeleteOptions body) and
  ``gracePeriodSeconds``: Background removes the object and the garbage collector deletes its pods;
  Foreground keeps it (``deletionTimestamp``, finalizer ``foregroundDeletion``) until they are gone;
  Orphan (the batch/v1 Job default, answered with a ``Warning`` header) strips their owner
  reference. Pods are deleted gracefully: Terminating (``deletionTimestamp``, grace 30 s), then
  Failed (exit 137) when the grace ran out, then removed (:meth:`FakeApiServer.advance`); unbound or
  finished pods go at once (the answer is the Pod). Namespaces: ``deletionTimestamp`` and
  ``status.phase: Terminating`` while the namespace controller deletes the content (pods
  gracefully), then gone (at once without controllers). A ResourceClaim in use keeps
  ``deletionTimestamp`` (delete-protection finalizer) until no pod holds it. 404 when absent.
- patch: ``PATCH`` with ``application/merge-patch+json`` (RFC 7386) or
  ``application/strategic-merge-patch+json``. The strategic merge is implemented as a JSON merge
  patch, with the difference that lists whose Go type has a merge key are merged by that key:
  ``spec.containers`` / ``initContainers`` (``name``), container ``env`` (``name``),
  ``volumes`` (``name``), ``tolerations`` are *replaced* (as in Kubernetes, they have no patch
  strategy), and node ``spec.taints`` are *replaced* (Kubernetes declares no patch strategy for
  taints either, so a strategic merge of taints replaces the list). ``$patch`` directives and
  ``application/json-patch+json`` are not implemented (415 Status).
- server-side apply: ``PATCH`` with ``application/apply-patch+yaml`` (see :meth:`FakeApiServer._apply`):
  create when absent, ``metadata.managedFields`` per manager, 409 on a conflict, ``force=true``.
- discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>`` list
  exactly the kinds above (:func:`discovery_document`), enough for the real kubectl.
- replace: ``PUT``; a ``metadata.resourceVersion`` in the body that is not the current one gives
  409 ``Conflict``; an absent item gives 404.
- normalisation (create, patch, replace): quantities canonical, empty ``env[].value`` dropped
  (:func:`server_normalise`); an update that changes nothing is not written (same resourceVersion).
- update validation (patch and replace): a change of an immutable field is 422 ``Invalid`` with
  ``details.causes[].field`` — a Job's ``spec.template`` / ``selector`` / ``completionMode`` /
  ``podFailurePolicy`` / ``backoffLimitPerIndex`` / ``completions`` (except an Indexed Job's
  elastic resize; a suspended, never started Job may change its template's scheduling directives),
  a Deployment's ``spec.selector``. A created Job gets its generated ``spec.selector``
  (controller-uid) and template labels, as kube-apiserver's Job strategy gives them.

Metadata: ``uid`` (uuid4), ``resourceVersion`` (one increasing counter for the whole server),
``creationTimestamp``, ``generation`` (1 on create, +1 when ``spec`` changes on patch/replace).
Namespaces get the ``kubernetes.io/metadata.name`` label and ``status.phase: Active``.

Controllers (on by default, ``controllers=False`` to switch off), run after every write and on
:meth:`~FakeApiServer.advance` (the fake's clock): the scheduler binds a pod pinned by
``kubernetes.io/hostname`` to that node (``spec.nodeName``) and DefaultTolerationSeconds adds the
300 s not-ready / unreachable tolerations; the Job controller creates ``parallelism`` pods
``<job>-<5 chars>`` (labels ``job-name``, ``batch.kubernetes.io/job-name``, ``controller-uid``, the
template's; Indexed: the completion-index annotation), keeps ``active`` / ``succeeded`` / ``failed``
/ ``terminating``, replaces failed pods within ``backoffLimit``, and sets ``FailureTarget`` →
``Failed`` or ``SuccessCriteriaMet`` → ``Complete`` (the terminal condition only once no pod is
left running); a Deployment gets a ReplicaSet per pod template (``pod-template-hash``; a template change → a new
one, the old scaled to 0 — Recreate waits for the old pods) and each ReplicaSet ``spec.replicas``
pods; :meth:`set_pod_crash_loop` shows a restarting container (CrashLoopBackOff, restartCount); the garbage collector deletes pods whose
owner is gone; the taint-eviction controller marks pods on a node with an untolerated NoExecute
taint ``DisruptionTarget`` (DeletionByTaintManager) and deletes them; :meth:`set_node_ready` adds and
removes the node lifecycle controller's not-ready / unreachable taints. DRA: the resourceclaim
controller generates ``<pod>-<claim>-<5 chars>`` claims from a pod's ``resourceClaimTemplateName``
(owned by the pod, ``status.resourceClaimStatuses``), un-reserves and deallocates claims of pods gone
or done and deletes their generated claims; the scheduler's DynamicResources plugin allocates
devices from ResourceSlices (the highest ``pool.generation`` of each pool only; DeviceClass and
request CEL selectors, ExactCount / All,
``firstAvailable``, never a device held by another claim, KEP-4815 partitionable devices: a device
that ``consumesCounters`` only while its pool's ``sharedCounters`` have enough left, see
:func:`_counters_fit`), writes ``status.allocation`` /
``reservedFor`` and binds the pod to the node, or leaves it Pending (PodScheduled False
Unschedulable, a ``FailedScheduling`` event). The NVIDIA DRA driver's NodePrepareResources check of
a claim's opaque ``GpuConfig`` / ``MigDeviceConfig`` sharing strategy against its feature gates, only
when a test sets :attr:`FakeApiServer.nvidia_dra_feature_gates` (read from the driver's source, not
run: see :meth:`FakeApiServer._nvidia_prepare_error`): a refused pod stays Pending in
ContainerCreating with the kubelet's ``FailedPrepareDynamicResources`` event. A pod without claims
is bound to its ``nodeSelector`` host only when the node's ``status.allocatable`` covers the extended resources it
requests (kube-scheduler's NodeResourcesFit; a name the node does not advertise is 0), else it stays
Pending the same way ("0/N nodes are available: 1 Insufficient <name>") and is retried on every
change; ``ignored_by_scheduler`` names what an extender such as HAMi's takes over.

Admission: ResourceQuota (plugin/resourcequota + pkg/quota/v1/evaluator/core/pods.go): a pod create
(direct, or by the Job / Deployment controllers) that would take a namespace quota's ``pods``,
``cpu`` / ``memory`` (``requests.`` / ``limits.``) or ``requests.<extended>`` over ``hard`` is 403
Forbidden ``pods "x" is forbidden: exceeded quota: <name>, requested: …, used: …, limited: …``;
``limits.<extended>`` is accepted but never counted; ``status.hard`` / ``status.used`` are kept by
the quota controller; ``spec.hard`` is stored canonical (:func:`canonical_quantity`). A controller
whose pod was refused writes a ``FailedCreate`` Warning Event (``Error creating: <message>``) and
tries again after :attr:`FakeApiServer.create_backoff` (fake clock). Events are listed with field
selectors ``reason``, ``type``, ``involvedObject.{kind,name,namespace,uid}``. The pod lifecycle
records the scheduler's and the kubelet's events: ``Scheduled`` when the scheduler binds a pod,
``Pulled`` / ``Created`` / ``Started`` when its containers start (:meth:`set_pod_phase` Running),
``Killing`` on a graceful delete of running containers, ``BackOff`` in a crash loop.

Pod logs: ``GET .../pods/{name}/log`` (text/plain; ``tailLines``, ``limitBytes``, ``container``,
``previous``) answers what :meth:`~FakeApiServer.set_pod_log` stored, with the API server's and the
kubelet's errors (see :meth:`FakeApiServer._pod_log`).

Not implemented: ``sendInitialEvents`` (streaming lists), other kinds/API groups, aggregated
discovery (``APIGroupDiscoveryList``; the plain documents answer), OpenAPI (``/openapi/v2``,
``/openapi/v3``: 404, so kubectl apply needs ``--validate=false``), server-side printing (``as=Table``:
kubectl falls back to its NAME / AGE columns), managedFields of non-apply writes,
authentication/authorization, other admission/defaulting (beyond the tolerations above, quota
scopes and the "must specify requests" constraint), finalizers other than foregroundDeletion,
``dryRun``, rollout surge/availability budgets and history, json-patch, schema
validation beyond the checks listed above; DRA constraints (matchAttribute), admin access, device
taints, capacity selectors and CEL beyond the subset of :func:`cel_compile` (refused with 422).

Test controls: :meth:`~FakeApiServer.set_pod_phase`, :meth:`~FakeApiServer.set_node_ready`,
:meth:`~FakeApiServer.advance`, :meth:`~FakeApiServer.objects`,
:meth:`~FakeApiServer.inject` (fault injection), :attr:`~FakeApiServer.requests` (a log of
``(method, path)``), :attr:`~FakeApiServer.request_log` (method, path, query and how many objects
the answer carried: the items of a list, the events of a watch).

Layout
------
One module per topic; :class:`FakeApiServer` (``server``) is assembled from one mixin per component:
``resources`` (kinds, discovery, errors), ``selectors``, ``quantity``, ``names`` (name and label
rules, field errors), ``dra_capacity`` and ``cel`` (DRA fit rules and selectors), ``patch`` (merge
patches, server-side apply field sets), ``store`` (store, faults, watch streams), ``handler`` (HTTP);
the mixins ``scheduler``, ``controllers``, ``validation``, ``dra``, ``reads``, ``quotas_events`` and
``writes``. Import from the package: ``from tests.kube.fake_apiserver import FakeApiServer``.
"""

from __future__ import annotations

from tests.kube.fake_apiserver.cel import CelError, cel_compile, cel_evaluate, device_env
from tests.kube.fake_apiserver.dra_capacity import dra_sample
from tests.kube.fake_apiserver.quantity import canonical_quantity, format_quantity, parse_quantity
from tests.kube.fake_apiserver.resources import RESOURCES, ApiError, Resource
from tests.kube.fake_apiserver.server import FakeApiServer, kubeconfig_for
from tests.kube.fake_apiserver.store import BOOKMARK_FREQUENCY_S, next_bookmark_time

__all__ = [
    "BOOKMARK_FREQUENCY_S",
    "RESOURCES",
    "ApiError",
    "CelError",
    "FakeApiServer",
    "Resource",
    "canonical_quantity",
    "cel_compile",
    "cel_evaluate",
    "device_env",
    "dra_sample",
    "format_quantity",
    "kubeconfig_for",
    "next_bookmark_time",
    "parse_quantity",
]
