"""Defaults and validation of created objects (pods, taints, DRA claims, slices)."""

from __future__ import annotations

from decimal import Decimal

from tests.kube.fake_apiserver.cel import CelError, cel_compile
from tests.kube.fake_apiserver.names import (
    _NAME_RULES,
    FieldErrors,
    dns1123_subdomain_errors,
    invalid_error,
    label_value_errors,
    qualified_name_errors,
    validate_labels,
)
from tests.kube.fake_apiserver.quantity import _is_extended, parse_quantity
from tests.kube.fake_apiserver.resources import Resource


class ValidationMixin:
    """Defaults and validation of created objects (pods, taints, DRA claims, slices). Mixed into :class:`FakeApiServer`."""

    # -- validation and defaulting on create / update -------------------------------------------------
    _EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    _TEMPLATE_KINDS = ("jobs", "deployments", "replicasets", "daemonsets")

    @staticmethod
    def _default_pod_spec(spec: dict, *, pod: bool) -> None:
        """pkg/apis/core/v1/defaults.go: SetDefaults_PodSpec gives ``restartPolicy: Always`` (pods and
        pod templates); SetDefaults_Pod — for Pod objects only, not templates — copies every limit
        without a request into ``requests`` ("If a container specifies its own memory limit, but does
        not specify a memory request, Kubernetes automatically assigns a memory request that matches
        the limit", docs "Assign Memory Resources to Containers and Pods"; the same for extended
        resources: docs "Schedule GPUs" — limits only, requests default to them)."""
        if not isinstance(spec, dict):
            return
        spec.setdefault("restartPolicy", "Always")
        if not pod:
            return
        for group in ("initContainers", "containers"):
            for c in spec.get(group) or []:
                res = c.get("resources") if isinstance(c, dict) else None
                if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
                    requests = res.setdefault("requests", {})
                    if isinstance(requests, dict):
                        for name, value in res["limits"].items():
                            requests.setdefault(name, value)

    @staticmethod
    def _default_device_requests(devices) -> None:
        """pkg/apis/resource/v1 defaults.go SetDefaults_ExactDeviceRequest (and DeviceSubRequest):
        ``allocationMode: ExactCount`` and, for ExactCount, ``count: 1``."""
        if not isinstance(devices, dict):
            return
        for req in devices.get("requests") or []:
            if not isinstance(req, dict):
                continue
            subs = [req.get("exactly")] + list(req.get("firstAvailable") or [])
            for sub in subs:
                if isinstance(sub, dict):
                    sub.setdefault("allocationMode", "ExactCount")
                    if sub["allocationMode"] == "ExactCount":
                        sub.setdefault("count", 1)

    def _apply_defaults(self, res: Resource, obj: dict) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if res.plural == "pods":
            self._default_pod_spec(spec, pod=True)
        elif res.plural in self._TEMPLATE_KINDS:
            self._default_pod_spec((spec.get("template") or {}).get("spec"), pod=False)
        elif res.plural == "services":
            # pkg/apis/core/v1/defaults.go SetDefaults_Service / SetDefaults_ServicePort: type
            # ClusterIP, sessionAffinity None, port protocol TCP, targetPort = port; a ClusterIP
            # (not headless "None") gets an address from the service CIDR.
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    if "port" in port:
                        port.setdefault("targetPort", port["port"])
            if spec["type"] == "ClusterIP" and not spec.get("clusterIP"):
                n = self._rv % 65000
                spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
            if spec.get("clusterIP"):
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
        elif res.plural == "resourceclaims":
            self._default_device_requests(spec.get("devices"))
        elif res.plural == "resourceclaimtemplates":
            self._default_device_requests((spec.get("spec") or {}).get("devices"))

    def _validate(self, res: Resource, obj: dict, *, create: bool) -> None:
        """422 Invalid with every cause, as the registries' Validate / ValidateUpdate answer."""
        errs = FieldErrors()
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        if create:
            if not name:
                errs.required("metadata.name", "name or generateName is required")
            else:
                for msg in _NAME_RULES.get(res.plural, dns1123_subdomain_errors)(name):
                    errs.invalid("metadata.name", name, msg)
        validate_labels(meta.get("labels"), "metadata.labels", errs)
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        if res.plural == "pods" and create:
            self._validate_pod_spec(spec, "spec", errs)
        elif res.plural in self._TEMPLATE_KINDS and create:
            template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
            # ValidatePodTemplateSpec: the template's labels (a Job's carry job-name = the Job's
            # name, which is why a Job name longer than 63 characters is refused), then its spec.
            validate_labels((template.get("metadata") or {}).get("labels"), "spec.template.labels", errs)
            tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
            self._validate_pod_spec(tspec, "spec.template.spec", errs)
            if res.plural == "jobs" and tspec.get("restartPolicy") not in ("OnFailure", "Never"):
                # pkg/apis/batch/validation/validation.go validateJobSpec.
                errs.not_supported(
                    "spec.template.spec.restartPolicy", tspec.get("restartPolicy"), ["OnFailure", "Never"]
                )
        elif res.plural == "nodes":
            self._validate_taints(spec.get("taints"), errs)
        elif res.plural == "resourceclaims":
            self._validate_device_claim(spec.get("devices"), "spec.devices", errs)
        elif res.plural == "resourceclaimtemplates":
            validate_labels(((spec.get("metadata") or {}).get("labels")), "spec.metadata.labels", errs)
            self._validate_device_claim((spec.get("spec") or {}).get("devices"), "spec.spec.devices", errs)
        elif res.plural == "deviceclasses":
            self._validate_selectors(spec.get("selectors"), "spec.selectors", errs)
        elif res.plural == "resourceslices":
            self._validate_slice(spec, errs)
        if errs:
            raise invalid_error(res, name, errs)

    def _validate_pod_spec(self, spec: dict, path: str, errs: FieldErrors) -> None:
        """pkg/apis/core/validation ValidatePodSpec, the parts Suanchi sends: containers (required,
        names DNS labels, unique), ``restartPolicy``, resources (ValidateResourceRequirements) and
        DRA claims (validatePodResourceClaims, validateResourceClaimNames)."""
        if not spec.get("containers"):
            errs.required(f"{path}.containers")
        claim_names: set[str] = set()
        for i, pc in enumerate(spec.get("resourceClaims") or []):
            p = f"{path}.resourceClaims[{i}]"
            pc = pc if isinstance(pc, dict) else {}
            cname = pc.get("name") or ""
            errs.unique_label_name(f"{p}.name", cname, claim_names, empty_too=True)
            has_claim, has_tpl = bool(pc.get("resourceClaimName")), bool(pc.get("resourceClaimTemplateName"))
            if not has_claim and not has_tpl:
                errs.invalid(p, pc, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")
            elif has_claim and has_tpl:
                errs.invalid(
                    p,
                    pc,
                    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
                )
            for field in ("resourceClaimName", "resourceClaimTemplateName"):
                for msg in dns1123_subdomain_errors(pc[field]) if pc.get(field) else []:
                    errs.invalid(f"{p}.{field}", pc[field], msg)
        if spec.get("restartPolicy") not in (None, "Always", "OnFailure", "Never"):
            errs.not_supported(
                f"{path}.restartPolicy", spec["restartPolicy"], ["Always", "OnFailure", "Never"]
            )
        seen: set[str] = set()
        for group in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(group) or []):
                cp = f"{path}.{group}[{i}]"
                c = c if isinstance(c, dict) else {}
                cname = c.get("name") or ""
                errs.unique_label_name(f"{cp}.name", cname, seen)
                resources = c.get("resources") if isinstance(c.get("resources"), dict) else {}
                self._validate_resources(resources, f"{cp}.resources", errs)
                for j, ref in enumerate(resources.get("claims") or []):
                    rname = (ref or {}).get("name") if isinstance(ref, dict) else ref
                    if rname not in claim_names:
                        detail = (
                            "must be one of the names in pod.spec.resourceClaims: "
                            + ", ".join(sorted(claim_names))
                            if claim_names
                            else "must be one of the names in pod.spec.resourceClaims which is empty"
                        )
                        errs.not_found(f"{cp}.resources.claims[{j}]", rname, detail)

    @staticmethod
    def _validate_resources(resources: dict, path: str, errs: FieldErrors) -> None:
        """pkg/apis/core/validation ValidateResourceRequirements: quantities ≥ 0; extended resources
        (and hugepages) integers ("must be an integer") and — not overcommitable
        (helper.IsOvercommitAllowed) — a request equal to its limit, never a request without a limit."""

        def extended(name: str) -> bool:
            return _is_extended(name) or name.startswith("hugepages-")

        values: dict[str, dict[str, Decimal]] = {}
        for field in ("limits", "requests"):
            values[field] = {}
            for rname, q in (resources.get(field) or {}).items():
                fp = f"{path}.{field}[{rname}]"
                try:
                    value = parse_quantity(q)[0]
                except (ValueError, ArithmeticError):
                    errs.invalid(
                        fp,
                        q,
                        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                    continue
                values[field][rname] = value
                if value < 0:
                    errs.invalid(fp, q, "must be greater than or equal to 0")
                if extended(rname) and value != value.to_integral_value():
                    errs.invalid(fp, q, "must be an integer")
        limits, requests = values["limits"], values["requests"]
        raw_limits = resources.get("limits") or {}
        for rname, req in requests.items():
            fp = f"{path}.requests[{rname}]"
            shown = (resources.get("requests") or {}).get(rname)
            if rname in limits:
                if extended(rname) and req != limits[rname]:
                    errs.invalid(fp, shown, f"must be equal to {rname} limit of {raw_limits[rname]}")
                elif req > limits[rname]:
                    errs.invalid(
                        fp, shown, f"must be less than or equal to {rname} limit of {raw_limits[rname]}"
                    )
            elif extended(rname) and rname not in raw_limits:
                errs.required(f"{path}.limits", "Limit must be set for non overcommitable resources")

    def _validate_taints(self, taints, errs: FieldErrors) -> None:
        """pkg/apis/core/validation validateNodeTaints: key a qualified name, value a label value,
        effect one of the three, and unique by key and effect."""
        seen: set[tuple[str, str]] = set()
        for i, t in enumerate(taints or []):
            p = f"spec.taints[{i}]"
            t = t if isinstance(t, dict) else {}
            key = t.get("key") or ""
            for msg in qualified_name_errors(key):
                errs.invalid(f"{p}.key", key, msg)
            for msg in label_value_errors(str(t.get("value") or "")):
                errs.invalid(f"{p}.value", t.get("value"), msg)
            effect = t.get("effect") or ""
            if not effect:
                errs.required(f"{p}.effect")
            elif effect not in self._EFFECTS:
                errs.not_supported(f"{p}.effect", effect, self._EFFECTS)
            if (key, effect) in seen:
                errs.duplicate(p, t, "taints must be unique by key and effect pair")
            seen.add((key, effect))

    # -- resource.k8s.io/v1 validation (pkg/apis/resource/validation/validation.go) --------------------
    # Shapes: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/
    # (DeviceClaim.requests[]: name, exactly {deviceClassName, selectors[].cel.expression,
    # allocationMode ExactCount | All, count} or firstAvailable[]), device-class-v1, resource-slice-v1.

    def _validate_selectors(self, selectors, path: str, errs: FieldErrors) -> None:
        for j, sel in enumerate(selectors or []):
            sp = f"{path}[{j}]"
            cel = (sel or {}).get("cel") if isinstance(sel, dict) else None
            if not isinstance(cel, dict):
                errs.required(f"{sp}.cel")
                continue
            expr = cel.get("expression")
            if not expr:
                errs.required(f"{sp}.cel.expression")
                continue
            try:
                cel_compile(expr)
            except CelError as e:
                errs.invalid(f"{sp}.cel.expression", expr, f"compilation failed: {e}")

    def _validate_exact(self, req: dict, path: str, errs: FieldErrors) -> None:
        cls = req.get("deviceClassName") or ""
        if not cls:
            errs.required(f"{path}.deviceClassName")
        for msg in dns1123_subdomain_errors(cls) if cls else []:
            errs.invalid(f"{path}.deviceClassName", cls, msg)
        self._validate_selectors(req.get("selectors"), f"{path}.selectors", errs)
        mode = req.get("allocationMode", "ExactCount")
        if mode == "ExactCount":
            count = req.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
                errs.invalid(f"{path}.count", count, "must be greater than zero")
        elif mode == "All":
            if req.get("count"):
                errs.invalid(
                    f"{path}.count", req["count"], "must not be specified when allocationMode is 'All'"
                )
        else:
            errs.not_supported(f"{path}.allocationMode", mode, ["All", "ExactCount"])

    def _validate_device_claim(self, devices, path: str, errs: FieldErrors) -> None:
        if devices is None:
            return
        if not isinstance(devices, dict):
            errs.invalid(path, devices, "must be an object")
            return
        names: set[str] = set()
        for i, req in enumerate(devices.get("requests") or []):
            rp = f"{path}.requests[{i}]"
            req = req if isinstance(req, dict) else {}
            rname = req.get("name") or ""
            errs.unique_label_name(f"{rp}.name", rname, names)
            exactly, first = req.get("exactly"), req.get("firstAvailable")
            if exactly is None and not first:
                errs.required(rp, "exactly one of `exactly` or `firstAvailable` is required")
            elif exactly is not None and first:
                errs.invalid(
                    rp,
                    None,
                    "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
                )
            elif exactly is not None:
                self._validate_exact(exactly if isinstance(exactly, dict) else {}, f"{rp}.exactly", errs)
            else:
                subnames: set[str] = set()
                for k, sub in enumerate(first):
                    sp = f"{rp}.firstAvailable[{k}]"
                    sub = sub if isinstance(sub, dict) else {}
                    sname = sub.get("name") or ""
                    errs.unique_label_name(f"{sp}.name", sname, subnames)
                    self._validate_exact(sub, sp, errs)
        for i, constraint in enumerate(devices.get("constraints") or []):
            for j, rname in enumerate((constraint or {}).get("requests") or []):
                if rname not in names:
                    errs.invalid(
                        f"{path}.constraints[{i}].requests[{j}]",
                        rname,
                        "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'",
                    )

    def _validate_slice(self, spec: dict, errs: FieldErrors) -> None:
        """ResourceSlice v1: driver (a DNS subdomain), pool {name, generation, resourceSliceCount ≥ 1},
        exactly one of nodeName / nodeSelector / allNodes / perDeviceNodeSelection, devices (≤ 128,
        names DNS labels, unique) whose attributes hold exactly one of int / bool / string / version."""
        driver = spec.get("driver") or ""
        if not driver:
            errs.required("spec.driver")
        for msg in dns1123_subdomain_errors(driver) if driver else []:
            errs.invalid("spec.driver", driver, msg)
        pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else None
        if pool is None:
            errs.required("spec.pool")
        else:
            if not pool.get("name"):
                errs.required("spec.pool.name")
            if not isinstance(pool.get("generation", 0), int) or pool.get("generation", 0) < 0:
                errs.invalid(
                    "spec.pool.generation", pool.get("generation"), "must be greater than or equal to 0"
                )
            if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] <= 0:
                errs.invalid(
                    "spec.pool.resourceSliceCount",
                    pool.get("resourceSliceCount"),
                    "must be greater than zero",
                )
        where = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(f)]
        if len(where) != 1:
            errs.required(
                "spec",
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            )
        devices = spec.get("devices") or []
        counter_sets = spec.get("sharedCounters") or []
        if devices and counter_sets:  # the API reference: "Only one of Devices and SharedCounters"
            errs.invalid(
                "spec", "devices, sharedCounters", "only one of devices and sharedCounters may be set"
            )
        if len(counter_sets) > 8:
            errs.invalid("spec.sharedCounters", len(counter_sets), "must have at most 8 items")
        set_names: set[str] = set()
        for i, cs in enumerate(counter_sets):
            cp = f"spec.sharedCounters[{i}]"
            cs = cs if isinstance(cs, dict) else {}
            errs.unique_label_name(f"{cp}.name", cs.get("name") or "", set_names)
            counters = cs.get("counters") if isinstance(cs.get("counters"), dict) else {}
            if not counters:
                errs.required(f"{cp}.counters")
            for cname, counter in sorted(counters.items()):
                try:
                    parse_quantity((counter or {}).get("value"))
                except (ValueError, TypeError, AttributeError):
                    errs.invalid(f"{cp}.counters[{cname}].value", counter, "must be a quantity")
        if (
            any((d or {}).get("consumesCounters") for d in devices if isinstance(d, dict))
            and len(devices) > 64
        ):
            # "If any device uses taints or consumes counters the limit is 64."
            errs.invalid("spec.devices", len(devices), "must have at most 64 items")
        if len(devices) > 128:
            errs.invalid(
                "spec.devices", len(devices), "must have at most 128 items"
            )  # ResourceSliceMaxDevices
        names: set[str] = set()
        for i, dev in enumerate(devices):
            dp = f"spec.devices[{i}]"
            dev = dev if isinstance(dev, dict) else {}
            dname = dev.get("name") or ""
            errs.unique_label_name(f"{dp}.name", dname, names)
            for j, c in enumerate(dev.get("consumesCounters") or []):
                c = c if isinstance(c, dict) else {}
                if not c.get("counterSet"):
                    errs.required(f"{dp}.consumesCounters[{j}].counterSet")
                if not c.get("counters"):
                    errs.required(f"{dp}.consumesCounters[{j}].counters")
            for aname, value in sorted((dev.get("attributes") or {}).items()):
                ap = f"{dp}.attributes[{aname}]"
                if (
                    not isinstance(value, dict)
                    or len([k for k in value if k in ("int", "bool", "string", "version")]) != 1
                    or len(value) != 1
                ):
                    errs.invalid(ap, value, "exactly one value must be specified")
