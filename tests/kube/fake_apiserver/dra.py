"""Dynamic resource allocation: ResourceSlices, claims, the DRA allocator and the kubelet's prepare step."""

from __future__ import annotations

import copy
import uuid
from decimal import Decimal

from tests.kube.fake_apiserver.cel import CelError, cel_compile, cel_evaluate, device_env
from tests.kube.fake_apiserver.dra_capacity import (
    _consumable_fits,
    _consumed_capacity,
    _counter_consumption,
    _counters_fit,
    _first_fitting,
    _quantity_text,
)
from tests.kube.fake_apiserver.names import FieldErrors
from tests.kube.fake_apiserver.quantity import parse_quantity
from tests.kube.fake_apiserver.resources import _now, _random_suffix


class DraMixin:
    """Dynamic resource allocation: ResourceSlices, claims, the DRA allocator and the kubelet's prepare step. Mixed into :class:`FakeApiServer`."""

    def add_resource_slice(
        self,
        name: str,
        node: str,
        driver: str,
        devices: list[dict],
        pool: str | None = None,
        generation: int = 1,
    ) -> dict:
        """Publish a ResourceSlice as a DRA driver's kubelet plugin would (spec.driver, nodeName,
        pool {name, generation, resourceSliceCount}, devices [{name, attributes, capacity}]). A
        driver that restarts republishes its pool with a higher ``generation``; until it deletes
        them, the older slices stay listed (and are ignored: :meth:`_slice_devices`)."""
        return self.publish_resource_slice(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
                    "devices": copy.deepcopy(devices),
                },
            }
        )

    def publish_resource_slice(self, obj: dict) -> dict:
        """Publish a whole ResourceSlice (e.g. a driver's real one, :func:`dra_sample`), checked as
        the API server checks a create (ValueError with the causes when it would be refused);
        server-owned metadata (uid, resourceVersion, creationTimestamp) is the fake's."""
        obj = copy.deepcopy(obj)
        errs = FieldErrors()
        self._validate_slice(obj.get("spec") or {}, errs)
        if errs:
            raise ValueError(f"ResourceSlice {obj.get('metadata', {}).get('name')}: {errs}")
        meta = obj.setdefault("metadata", {})
        obj["metadata"] = {
            "name": meta["name"],
            **{k: meta[k] for k in ("labels", "ownerReferences") if k in meta},
        }
        with self._lock:
            self._new_meta(obj)
            self._bump(obj)
            self._store[("resourceslices", "", obj["metadata"]["name"])] = obj
            return copy.deepcopy(obj)

    # -- DRA: the resourceclaim controller and the scheduler's DynamicResources plugin -----------------
    def _pod_claims(self, pod: dict) -> list[tuple[str, str | None, bool]]:
        """(pod claim name, ResourceClaim name or None while not generated yet, from a template)."""
        spec = pod.get("spec") or {}
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        out = []
        for pc in spec.get("resourceClaims") or []:
            if pc.get("resourceClaimName"):
                out.append((pc["name"], pc["resourceClaimName"], False))
            else:
                out.append((pc["name"], statuses.get(pc["name"]), True))
        return out

    def _sync_resource_claims(self) -> None:
        """pkg/controller/resourceclaim/controller.go: for a pod's ``resourceClaimTemplateName`` it
        creates a ResourceClaim (generateName ``<pod>-<claim>-``, the template's metadata and spec,
        owned by the pod, annotation ``resource.kubernetes.io/pod-claim-name``) and records it in
        ``status.resourceClaimStatuses``; it drops from ``status.reservedFor`` the pods that are gone
        or done (Succeeded / Failed), deallocates a claim reserved for nobody, and deletes a generated
        claim whose pod is done (the garbage collector deletes it once the pod is gone)."""
        for key, pod in list(self._store.items()):
            if key[0] != "pods" or pod["metadata"].get("deletionTimestamp"):
                continue
            statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
            changed = False
            for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
                tname = pc.get("resourceClaimTemplateName")
                if not tname or any(s.get("name") == pc.get("name") for s in statuses):
                    continue
                template = self._store.get(("resourceclaimtemplates", key[1], tname))
                if template is None:
                    continue  # the controller retries; the scheduler reports the pod waiting
                base = f"{key[2]}-{pc['name']}"
                if len(base) > 57:
                    base = base[:57]
                claim = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": f"{base}-{_random_suffix()}",
                        "generateName": f"{base}-",
                        "namespace": key[1],
                        "labels": copy.deepcopy(
                            ((template.get("spec") or {}).get("metadata") or {}).get("labels") or {}
                        ),
                        "annotations": {
                            **copy.deepcopy(
                                ((template.get("spec") or {}).get("metadata") or {}).get("annotations") or {}
                            ),
                            "resource.kubernetes.io/pod-claim-name": pc["name"],
                        },
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": key[2],
                                "uid": pod["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
                }
                if not claim["metadata"]["labels"]:
                    del claim["metadata"]["labels"]
                self._new_meta(claim)
                self._store[("resourceclaims", key[1], claim["metadata"]["name"])] = claim
                statuses.append({"name": pc["name"], "resourceClaimName": claim["metadata"]["name"]})
                changed = True
            if changed:
                pod.setdefault("status", {})["resourceClaimStatuses"] = statuses
                self._bump(pod)
        pods_by_uid = {p["metadata"]["uid"]: p for k, p in self._store.items() if k[0] == "pods"}

        def done(pod: dict | None) -> bool:
            return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

        for key, claim in list(self._store.items()):
            if key[0] != "resourceclaims":
                continue
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            keep = [r for r in reserved if not done(pods_by_uid.get(r.get("uid")))]
            if keep != reserved or (not keep and status.get("allocation")):
                if keep:
                    status["reservedFor"] = keep
                else:
                    status.pop("reservedFor", None)
                    status.pop("allocation", None)
                if status:
                    claim["status"] = status
                else:
                    claim.pop("status", None)
                self._bump(claim)
            owner = next(
                (r for r in claim["metadata"].get("ownerReferences") or [] if r.get("kind") == "Pod"), None
            )
            owner_pod = pods_by_uid.get(owner["uid"]) if owner else None
            if owner_pod is not None and done(owner_pod) and not keep:
                del self._store[key]
                self._rv += 1
            elif claim["metadata"].get("deletionTimestamp") and not keep:
                del self._store[key]  # finalizer resource.kubernetes.io/delete-protection released
                self._rv += 1

    def _devices_in_use(self, skip: set[tuple[str, str]] = frozenset()) -> set[tuple[str, str, str]]:
        used = set()
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            ) or []:
                if not r.get("shareID"):  # a shared device's allocations count by capacity instead
                    used.add((r.get("driver"), r.get("pool"), r.get("device")))
        return used

    def _capacity_in_use(self, skip: set) -> dict[tuple[str, str, str], dict[str, Decimal]]:
        """Capacity the allocated claims (but ``skip``) consume of each shared device
        (``allowMultipleAllocations``): the sum of their results' ``consumedCapacity``."""
        used: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                mine = used.setdefault((r.get("driver"), r.get("pool"), r.get("device")), {})
                for cap, q in (r.get("consumedCapacity") or {}).items():
                    mine[cap] = mine.get(cap, Decimal(0)) + parse_quantity(q)[0]
        return used

    @staticmethod
    def _selectors_match(selectors, driver: str, device: dict, what: str) -> bool:
        """structured/allocator.go selectorsMatch: every selector must be true; a CEL runtime error
        fails the allocation (CelError with the allocator's "CEL runtime error")."""
        env = device_env(driver, device)
        for i, sel in enumerate(selectors or []):
            expr = ((sel or {}).get("cel") or {}).get("expression", "")
            try:
                if cel_evaluate(cel_compile(expr), env) is not True:
                    return False
            except CelError as e:
                raise CelError(f"{what}: selector #{i}: CEL runtime error: {e}") from None
        return True

    def _slice_devices(self, node: str) -> list[tuple[str, str, dict]]:
        """(driver, pool, device) of the ResourceSlices of ``node`` (or ``allNodes``), from the
        highest generation of each pool only: resource.k8s.io/v1 ResourcePool.generation (k8s.io/api
        resource/v1 types.go) — "Consumers of ResourceSlices should only consider resources from the
        pool with the highest generation number"."""
        devices = []
        for spec in self._newest_slices(node):
            for dev in spec.get("devices") or []:
                devices.append((spec.get("driver"), (spec.get("pool") or {}).get("name"), dev))
        return devices

    def _shared_counters(self, node: str) -> dict[tuple[str, str], dict[tuple[str, str], Decimal]]:
        """(driver, pool) -> (counter set, counter) -> value, from the pools' newest slices."""
        pools: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for spec in self._newest_slices(node):
            mine = pools.setdefault((spec.get("driver"), (spec.get("pool") or {}).get("name")), {})
            for cs in spec.get("sharedCounters") or []:
                for cname, counter in (cs.get("counters") or {}).items():
                    mine[(cs.get("name"), cname)] = parse_quantity(counter["value"])[0]
        return pools

    def _counters_in_use(self, node: str, skip: set) -> dict[tuple[str, str], dict[tuple[str, str], Decimal]]:
        """(driver, pool) -> (counter set, counter) -> what the allocated claims (but ``skip``) consume."""
        by_name = {(d, p, dev.get("name")): dev for d, p, dev in self._slice_devices(node)}
        used: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}
        for key, claim in self._store.items():
            if key[0] != "resourceclaims" or (key[1], key[2]) in skip:
                continue
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                dev = by_name.get((r.get("driver"), r.get("pool"), r.get("device")))
                mine = used.setdefault((r.get("driver"), r.get("pool")), {})
                for ck, q in _counter_consumption(dev or {}).items():
                    mine[ck] = mine.get(ck, Decimal(0)) + q
        return used

    def _newest_slices(self, node: str) -> list[dict]:
        """The specs of the ResourceSlices of ``node`` (or ``allNodes``) of each pool's newest generation."""
        slices = []
        for (plural, _, _sname), rslice in sorted(self._store.items()):
            spec = rslice.get("spec") or {}
            if plural == "resourceslices" and (spec.get("nodeName") == node or spec.get("allNodes")):
                slices.append(spec)
        newest: dict[tuple, int] = {}
        for spec in slices:
            pool = spec.get("pool") or {}
            key = (spec.get("driver"), pool.get("name"))
            newest[key] = max(newest.get(key, 0), pool.get("generation") or 0)
        return [
            spec
            for spec in slices
            if ((spec.get("pool") or {}).get("generation") or 0)
            >= newest[(spec.get("driver"), (spec.get("pool") or {}).get("name"))]
        ]

    def _allocate_on(self, node: str, claims: list[tuple[str, dict]], in_use: set) -> list[dict]:
        """structured/allocator.go, reduced: each request takes ``count`` (ExactCount) or every
        (All) matching device from the ResourceSlices of ``node`` (or ``allNodes``), a device never
        twice and never one another claim holds; the DeviceClass's selectors and the request's must
        all be true; ``firstAvailable`` takes the first subrequest that fits. Returns the
        allocations in claim order; CelError (or ValueError with the reason) when it cannot."""
        taken = set(in_use)
        devices = self._slice_devices(node)
        skip = {(c.get("metadata", {}).get("namespace"), n) for n, c in claims}
        consumed = self._capacity_in_use(skip)
        counters = self._shared_counters(node)
        counters_used = self._counters_in_use(node, skip)
        allocations = []
        for claim_name, claim in claims:
            results, configs = [], []
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                options = (
                    [(req["name"], req["exactly"])]
                    if req.get("exactly")
                    else [(f"{req['name']}/{s['name']}", s) for s in req.get("firstAvailable") or []]
                )
                picked = None
                for rname, sub in options:
                    cls = self._store.get(("deviceclasses", "", sub.get("deviceClassName", "")))
                    if cls is None:
                        raise ValueError(
                            f"claim {claim_name}, request {rname}: device class {sub.get('deviceClassName')} does not exist"
                        )
                    matching = [
                        (d, p, dev)
                        for d, p, dev in devices
                        if self._selectors_match(
                            (cls.get("spec") or {}).get("selectors"),
                            d,
                            dev,
                            f"class {cls['metadata']['name']}",
                        )
                        and self._selectors_match(sub.get("selectors"), d, dev, f"claim {claim_name}")
                    ]
                    wanted = (sub.get("capacity") or {}).get("requests") or {}
                    free = [
                        (d, p, dev)
                        for d, p, dev in matching
                        if (d, p, dev.get("name")) not in taken
                        and _consumable_fits(dev, wanted, consumed.get((d, p, dev.get("name")), {}))
                        and _counters_fit(dev, counters.get((d, p)), counters_used.get((d, p), {}))
                    ]
                    if sub.get("allocationMode") == "All":
                        chosen = free if matching and len(free) == len(matching) else None
                    else:
                        count = sub.get("count", 1)
                        chosen = _first_fitting(free, count, counters, counters_used)
                    if chosen:
                        picked = (rname, chosen, cls)
                        break
                if picked is None:
                    raise ValueError(f"claim {claim_name}, request {req.get('name')}: not enough devices")
                rname, chosen, cls = picked
                wanted = (sub.get("capacity") or {}).get("requests") or {}
                for d, p, dev in chosen:
                    result = {"request": rname, "driver": d, "pool": p, "device": dev.get("name")}
                    if dev.get("allowMultipleAllocations"):
                        # KEP-5075: a shared device's result carries a shareID and consumedCapacity.
                        use = _consumed_capacity(dev, wanted)
                        mine = consumed.setdefault((d, p, dev.get("name")), {})
                        for cap, q in use.items():
                            mine[cap] = mine.get(cap, Decimal(0)) + q
                        result["shareID"] = str(uuid.uuid4())
                        result["consumedCapacity"] = {
                            cap: _quantity_text(q, dev["capacity"][cap]["value"]) for cap, q in use.items()
                        }
                    else:
                        taken.add((d, p, dev.get("name")))
                    mine = counters_used.setdefault((d, p), {})
                    for ck, q in _counter_consumption(dev).items():
                        mine[ck] = mine.get(ck, Decimal(0)) + q
                    results.append(result)
                for cfg in (cls.get("spec") or {}).get("config") or []:
                    configs.append({"source": "FromClass", "requests": [rname], **copy.deepcopy(cfg)})
            for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
                configs.append({"source": "FromClaim", **copy.deepcopy(cfg)})
            allocation = {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
            if configs:
                allocation["devices"]["config"] = configs
            allocations.append(allocation)
        return allocations

    @staticmethod
    def _allocated_node(claim: dict) -> str | None:
        terms = (
            (((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}).get(
                "nodeSelectorTerms"
            )
        ) or []
        for term in terms:
            for f in term.get("matchFields") or []:
                if f.get("key") == "metadata.name" and f.get("values"):
                    return f["values"][0]
        return None

    def _schedule_dra(self) -> None:
        """kube-scheduler with the DynamicResources plugin (pkg/scheduler/framework/plugins/
        dynamicresources): an unbound pod with ``spec.resourceClaims`` waits until its claims exist;
        it is bound to the first node (in name order, honouring ``nodeName`` / ``nodeSelector`` and
        NoSchedule / NoExecute taints) where every unallocated claim can be allocated and every
        allocated one is available; the claims get ``status.allocation`` and the pod in
        ``status.reservedFor``. Otherwise the pod stays Pending with PodScheduled False
        (Unschedulable) and a ``FailedScheduling`` Warning event from default-scheduler."""
        nodes = sorted((k[2], n) for k, n in self._store.items() if k[0] == "nodes")
        for key, pod in list(self._store.items()):
            spec = pod.get("spec") or {}
            if (
                key[0] != "pods"
                or not spec.get("resourceClaims")
                or pod["metadata"].get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") != "Pending"
                or self._bound(pod)
            ):
                continue
            reason = None
            claims: list[tuple[str, dict]] = []
            for pcname, cname, _generated in self._pod_claims(pod):
                if cname is None:
                    reason = f'waiting for dynamic resource controller to create the resourceclaim "{key[2]}-{pcname}"'
                    break
                claim = self._store.get(("resourceclaims", key[1], cname))
                if claim is None:
                    reason = f'resourceclaim "{cname}" not found'
                    break
                claims.append((cname, claim))
            unschedulable = 0
            if reason is None:
                host = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
                selector = spec.get("nodeSelector") or {}
                failures = []
                for name, node in nodes:
                    labels = node["metadata"].get("labels") or {}
                    if (host and name != host) or any(labels.get(k) != v for k, v in selector.items()):
                        continue
                    if any(
                        t.get("effect") in ("NoSchedule", "NoExecute")
                        and not any(self._tolerates(tol, t) for tol in spec.get("tolerations") or [])
                        for t in (node.get("spec") or {}).get("taints") or []
                    ):
                        continue
                    pending = [(n, c) for n, c in claims if not (c.get("status") or {}).get("allocation")]
                    if any(
                        self._allocated_node(c) not in (None, name)
                        for n, c in claims
                        if (c.get("status") or {}).get("allocation")
                    ):
                        unschedulable += 1
                        continue
                    try:
                        allocations = self._allocate_on(
                            name, pending, self._devices_in_use({(key[1], n) for n, _ in pending})
                        )
                    except (ValueError, CelError) as e:
                        failures.append(str(e))
                        unschedulable += 1
                        continue
                    for (_n, claim), allocation in zip(pending, allocations, strict=True):
                        claim.setdefault("status", {})["allocation"] = allocation
                    for _n, claim in claims:
                        reserved = claim.setdefault("status", {}).setdefault("reservedFor", [])
                        if not any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
                            reserved.append(
                                {"resource": "pods", "name": key[2], "uid": pod["metadata"]["uid"]}
                            )
                        self._bump(claim)
                    spec["nodeName"] = name
                    self._record_scheduled(pod, name)
                    pod["status"]["conditions"] = [
                        c for c in pod["status"].get("conditions") or [] if c.get("type") != "PodScheduled"
                    ] + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]
                    self._kubelet_prepare(pod, claims)
                    self._bump(pod)
                    break
                else:
                    total = len(nodes)
                    reason = f"0/{total} nodes are available: " + (
                        f"{unschedulable} cannot allocate all claims."
                        if unschedulable
                        else f"{total} node(s) didn't match Pod's node affinity/selector."
                    )
                    if failures:
                        reason += f" ({failures[0]})"
            if reason is not None:
                conditions = pod["status"].get("conditions") or []
                current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
                if current is None or current.get("message") != reason:
                    pod["status"]["conditions"] = [
                        c for c in conditions if c.get("type") != "PodScheduled"
                    ] + [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": reason,
                            "lastTransitionTime": _now(),
                        }
                    ]
                    self._bump(pod)
                    self._record_event(pod, "FailedScheduling", reason, "default-scheduler")

    # The NVIDIA DRA driver's check of a claim's sharing configuration, read from its source (not run):
    # sigs.k8s.io/dra-driver-nvidia-gpu (formerly NVIDIA/k8s-dra-driver-gpu) @
    # 22407113785e78c7763b4637689a201eb39c6199. cmd/gpu-kubelet-plugin/device_state.go prepareDevices
    # normalises and validates each opaque config of the allocation ("error validating GPU config: %w");
    # api/nvidia.com/resource/v1beta1/validate.go validateSharingStrategy refuses a strategy whose gate is
    # off. A GpuConfig without ``sharing`` is valid with the gates off (gpuconfig.go Normalize / Validate).
    NVIDIA_SHARING_GATES = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}

    def _nvidia_prepare_error(self, claim: dict) -> str:
        """The driver's error for ``claim`` (its error chain from DeviceState.Prepare inward), "" if none."""
        gates = self.nvidia_dra_feature_gates or {}
        devices = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        results = [r for r in devices.get("results") or [] if r.get("driver") == "gpu.nvidia.com"]
        for cfg in devices.get("config") or []:
            opaque = cfg.get("opaque") or {}
            params = opaque.get("parameters") or {}
            if opaque.get("driver") != "gpu.nvidia.com" or params.get("kind") not in (
                "GpuConfig",
                "MigDeviceConfig",
            ):
                continue
            if not any(not cfg.get("requests") or r.get("request") in cfg["requests"] for r in results):
                continue
            strategy = (params.get("sharing") or {}).get("strategy")
            if strategy is None:
                continue
            gate = self.NVIDIA_SHARING_GATES.get(strategy)
            if gate is None:
                error = (
                    f"unknown GPU sharing strategy: {strategy}, "
                    "supported GPU sharing strategies: TimeSlicing, MPS"
                )
            elif gates.get(gate):
                continue
            else:
                error = (
                    f'"{strategy}" is selected as the GPU sharing strategy, '
                    f'but the "{gate}" feature gate is not enabled'
                )
            return f"prepare devices failed: error validating GPU config: {error}"
        return ""

    def _kubelet_prepare(self, pod: dict, claims: list[tuple[str, dict]]) -> None:
        """The kubelet's NodePrepareResources for a pod just bound (only with
        :attr:`nvidia_dra_feature_gates` set). A refusal keeps the pod Pending with its containers
        waiting in ContainerCreating and a ``FailedPrepareDynamicResources`` Warning from the kubelet,
        its message the kubelet's wrapping (pkg/kubelet/kuberuntime "Failed to prepare dynamic
        resources: %v", pkg/kubelet/cm/dra/manager.go "NodePrepareResources failed for ResourceClaim
        %s: %s", as a real event of this driver shows them) around the driver's
        ("error preparing devices for claim <ns>/<name>:<uid>: %w", cmd/gpu-kubelet-plugin/driver.go)."""
        if self.nvidia_dra_feature_gates is None:
            return
        meta = pod["metadata"]
        ns = meta.get("namespace", "")
        for cname, claim in claims:
            error = self._nvidia_prepare_error(claim)
            if not error:
                continue
            uid = (claim.get("metadata") or {}).get("uid", "")
            message = (
                "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed "
                f"for ResourceClaim {cname}: error preparing devices for claim {ns}/{cname}:{uid}: {error}"
            )
            self._prepare_failed[(ns, meta["name"])] = message
            pod["status"]["containerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
                for c in (pod.get("spec") or {}).get("containers") or []
            ]
            self._record_event(pod, "FailedPrepareDynamicResources", message, "kubelet")
            return

    @staticmethod
    def _bound(pod: dict) -> bool:
        return any(
            c.get("type") == "PodScheduled" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
