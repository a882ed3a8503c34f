"""Create, delete, update, patch and server-side apply."""

from __future__ import annotations

import copy
import json

from tests.kube.fake_apiserver.names import invalid_error, qualified_resource
from tests.kube.fake_apiserver.patch import (
    _at_path,
    _drop_nulls,
    _remove_path,
    field_path_text,
    field_paths,
    fields_v1,
    fields_v1_paths,
    merge_patch,
    strategic_merge_patch,
)
from tests.kube.fake_apiserver.quantity import server_normalise
from tests.kube.fake_apiserver.resources import (
    _STATUS_SUBRESOURCE,
    ApiError,
    Resource,
    _not_found,
    _now,
    _random_suffix,
)


class WritesMixin:
    """Create, delete, update, patch and server-side apply. Mixed into :class:`FakeApiServer`."""

    def _check_body(self, res: Resource, ns: str, body) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body of the request must be a {res.kind} object")
        if (
            body.get("kind", res.kind) != res.kind
            or body.get("apiVersion", res.api_version) != res.api_version
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) / kind ({body.get('kind')}) does not match "
                f"the expected {res.api_version} {res.kind}",
            )
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        body["kind"], body["apiVersion"] = res.kind, res.api_version
        return body

    def _invalid(
        self, res: Resource, name: str, field: str, message: str, reason: str = "FieldValueInvalid"
    ) -> ApiError:
        return invalid_error(res, name, [{"reason": reason, "message": message, "field": field}])

    # -- update validation: immutable fields ------------------------------------------------------
    # What the registries' ValidateUpdate refuses (ValidateImmutableField: field.Invalid(path, new
    # value, "field is immutable")). batch/v1 Job: pkg/apis/batch/validation/validation.go
    # ValidateJobSpecUpdate — spec.selector, spec.template (validatePodTemplateUpdate: only a Job that
    # is suspended and never started may change the template's scheduling directives),
    # spec.completionMode, spec.podFailurePolicy, spec.backoffLimitPerIndex, and spec.completions
    # (validateCompletions: only an Indexed Job may change it, together with parallelism — "elastic
    # Indexed Jobs"). apps/v1 Deployment: pkg/apis/apps/validation/validation.go
    # ValidateDeploymentUpdate — spec.selector.
    _JOB_IMMUTABLE = ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex")
    _SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")

    def _immutable_errors(self, res: Resource, old: dict, new: dict) -> list[str]:
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        fields: list[str] = []
        if res.plural == "deployments":
            if new_spec.get("selector") != old_spec.get("selector"):
                fields.append("selector")
            return fields
        if res.plural in ("resourceclaims", "resourceclaimtemplates"):
            # pkg/apis/resource/validation ValidateResourceClaimUpdate / ...TemplateUpdate: spec is
            # immutable.
            return ["spec"] if new_spec != old_spec else []
        if res.plural != "jobs":
            return fields
        for key in self._JOB_IMMUTABLE:
            if new_spec.get(key) != old_spec.get(key):
                fields.append(key)
        if new_spec.get("completions") != old_spec.get("completions") and not (
            new_spec.get("completionMode") == "Indexed"
            and new_spec.get("completions") == new_spec.get("parallelism")
        ):
            fields.append("completions")
        old_t, new_t = copy.deepcopy(old_spec.get("template")), copy.deepcopy(new_spec.get("template"))
        suspended_never_started = old_spec.get("suspend") is True and not (old.get("status") or {}).get(
            "startTime"
        )
        if suspended_never_started:  # AllowMutableSchedulingDirectives
            for tpl in (old_t, new_t):
                if isinstance(tpl, dict):
                    (tpl.get("metadata") or {}).pop("labels", None)
                    (tpl.get("metadata") or {}).pop("annotations", None)
                    for key in self._SCHEDULING_DIRECTIVES:
                        (tpl.get("spec") or {}).pop(key, None)
        if new_t != old_t:
            fields.append("template")
        return sorted(fields)

    def _validate_update(self, res: Resource, name: str, old: dict, new: dict) -> None:
        """422 Invalid, as kube-apiserver answers (apimachinery errors.NewInvalid): message
        ``Job.batch "x" is invalid: spec.template: Invalid value: …: field is immutable`` (several
        errors in ``[…, …]``), ``details.causes[]`` {reason FieldValueInvalid, message, field}."""
        fields = self._immutable_errors(res, old, new)
        if not fields:
            return
        group = res.api_version.split("/")[0] if "/" in res.api_version else ""
        qualified = f"{res.kind}.{group}" if group else res.kind
        causes = []
        for f in fields:
            value = json.dumps(
                new.get("spec") if f == "spec" else (new.get("spec") or {}).get(f), sort_keys=True
            )
            if len(value) > 120:
                value = value[:117] + "..."
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {value}: field is immutable",
                    "field": "spec" if f == "spec" else f"spec.{f}",
                }
            )
        text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        raise ApiError(
            422,
            "Invalid",
            f'{qualified} "{name}" is invalid: ' + (text if len(causes) == 1 else f"[{text}]"),
            {"name": name, "group": group, "kind": res.kind, "causes": causes},
        )

    def _default_job(self, obj: dict) -> None:
        """pkg/registry/batch/job/strategy.go PrepareForCreate → generateSelector: unless
        ``manualSelector``, the Job gets ``spec.selector`` {matchLabels: controller-uid} and its pod
        template the controller-uid and job-name labels (both plain and ``batch.kubernetes.io/``)."""
        spec = obj.setdefault("spec", {})
        if spec.get("manualSelector") is True:
            return
        meta = obj["metadata"]
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": meta["uid"],
                "controller-uid": meta["uid"],
                "batch.kubernetes.io/job-name": meta["name"],
                "job-name": meta["name"],
            }
        )
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}

    def _create(self, res: Resource, ns: str, body, query: dict) -> dict:
        """The create path of kube-apiserver, in its order: decode (400), mutating admission
        (NamespaceLifecycle: 404 / 403 Terminating), defaulting and the strategy's PrepareForCreate,
        validation (422 with every cause), validating admission (ResourceQuota: 403), storage (409
        AlreadyExists; ``object is being deleted: …`` while the old one is still terminating)."""
        obj = self._check_body(res, ns, server_normalise(copy.deepcopy(body)))
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            # names.SimpleNameGenerator: the prefix cut to 58 characters, then 5 random ones.
            meta["name"] = meta["generateName"][:58] + _random_suffix()
        name = meta.get("name") or ""
        if res.namespaced:
            self._namespace_lifecycle(res, ns, name)
        for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(key, None)
        self._new_meta(obj)
        if res.plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif res.plural == "pods":
            obj["status"] = {"phase": "Pending"}
        else:
            obj.pop("status", None)
        self._apply_defaults(res, obj)
        if res.plural == "jobs":
            self._default_job(obj)
        self._validate(res, obj, create=True)
        if res.plural == "resourcequotas":
            self._validate_quota(obj)
        if res.plural == "pods":
            self._admit_pod(obj)
        existing = self._store.get((res.plural, ns, name))
        if existing is not None:
            group, qual = qualified_resource(res)
            prefix = "object is being deleted: " if existing["metadata"].get("deletionTimestamp") else ""
            raise ApiError(
                409,
                "AlreadyExists",
                f'{prefix}{qual} "{name}" already exists',
                {"name": name, "group": group, "kind": res.plural},
            )
        self._store[(res.plural, ns, name)] = obj
        self._after_create(res, obj)
        return copy.deepcopy(obj)

    def _delete(self, res: Resource, ns: str, name: str, query: dict, body) -> tuple:
        """DELETE with ``propagationPolicy`` (query or DeleteOptions body) and ``gracePeriodSeconds``.

        Without a policy each kind uses its registry's DefaultGarbageCollectionPolicy: batch/v1 Jobs
        orphan their pods, with a Warning header (pkg/registry/batch/job/strategy.go), everything else
        deletes dependents in the background. Orphan removes the owner reference from the pods;
        Background removes the object now and the garbage collector deletes the pods gracefully;
        Foreground keeps the object (``deletionTimestamp``, finalizer ``foregroundDeletion``) until its
        pods are gone. A pod itself is deleted gracefully (see ``_delete_pod_gracefully``)."""
        obj = self._get(res, ns, name)
        options = body if isinstance(body, dict) else {}
        policy = query.get("propagationPolicy", [None])[0] or options.get("propagationPolicy")
        if options.get("orphanDependents") is True and not policy:
            policy = "Orphan"
        grace = query.get("gracePeriodSeconds", [None])[0]
        grace = options.get("gracePeriodSeconds") if grace is None else int(grace)
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "{policy}": '
                'supported values: "Foreground", "Background", "Orphan"',
            )
        headers: dict[str, str] = {}
        if policy is None and res.plural == "jobs":
            policy = "Orphan"
            headers["Warning"] = (
                '299 - "child pods are preserved by default when jobs are deleted; set '
                "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
                'suppress this warning"'
            )
        policy = policy or "Background"
        if res.plural == "namespaces":
            # pkg/registry/core/namespace/storage.go Delete: the namespace gets deletionTimestamp and
            # status.phase Terminating and is answered (200, the object); the namespace controller
            # (_sync_namespaces) deletes its content and then the namespace.
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                obj["status"] = {"phase": "Terminating"}
                self._bump(obj)
            answer = copy.deepcopy(obj)
            self._sync_namespaces(force=not self.controllers)
            self._run_controllers()
            return 200, answer, headers
        if res.plural == "resourceclaims" and ((obj.get("status") or {}).get("reservedFor")):
            # Finalizer resource.kubernetes.io/delete-protection: a claim in use stays (deletionTimestamp)
            # until no pod holds it (pkg/controller/resourceclaim removes the finalizer).
            meta = obj["metadata"]
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta.setdefault("finalizers", []).append("resource.kubernetes.io/delete-protection")
                self._bump(obj)
            return 200, copy.deepcopy(obj), headers
        if res.plural == "pods":
            # pkg/registry/core/pod/storage/storage.go ReturnDeletedObject: the answer is the Pod —
            # Terminating when graceful, as it was when it went at once.
            last = copy.deepcopy(obj)
            last["metadata"].setdefault("deletionTimestamp", _now())
            last["metadata"].setdefault("deletionGracePeriodSeconds", 0 if grace is None else grace)
            self._delete_pod_gracefully((res.plural, ns, name), grace)
            self._run_controllers()
            live = self._store.get((res.plural, ns, name))
            return 200, copy.deepcopy(live if live is not None else last), headers
        elif policy == "Foreground":
            meta = obj["metadata"]
            meta.setdefault("deletionTimestamp", _now())
            if "foregroundDeletion" not in (meta.get("finalizers") or []):
                meta.setdefault("finalizers", []).append("foregroundDeletion")
            self._bump(obj)
            for key, _pod in self._owned_by(meta["uid"], ns):
                self._delete_pod_gracefully(key, grace)
            self._run_controllers()
            if (res.plural, ns, name) in self._store:
                return 200, copy.deepcopy(obj), headers
        else:
            del self._store[(res.plural, ns, name)]
            if policy == "Orphan":
                for _key, pod in self._owned_by(obj["metadata"]["uid"], ns):
                    pod["metadata"]["ownerReferences"] = [
                        r
                        for r in pod["metadata"]["ownerReferences"]
                        if r.get("uid") != obj["metadata"]["uid"]
                    ]
                    self._bump(pod)
            self._run_controllers()
        group = res.api_version.split("/")[0] if "/" in res.api_version else ""
        return (
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": group, "kind": res.plural, "uid": obj["metadata"]["uid"]},
            },
            headers,
        )

    def _store_update(self, res: Resource, ns: str, name: str, old: dict, new: dict) -> dict:
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "name", "namespace", "generation"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        if "managedFields" not in meta and old["metadata"].get("managedFields"):
            # An update that leaves managedFields out keeps them (server-side apply's ownership).
            meta["managedFields"] = copy.deepcopy(old["metadata"]["managedFields"])
        meta["resourceVersion"] = old["metadata"].get("resourceVersion")
        if new == old:
            # A no-op update is not written: same resourceVersion, no watch event
            # (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go GuaranteedUpdate).
            return copy.deepcopy(old)
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        self._bump(new)
        self._store[(res.plural, ns, name)] = new
        return copy.deepcopy(new)

    def _patch(self, res: Resource, ns: str, name: str, body, content_type: str, status_only: bool) -> dict:
        old = self._get(res, ns, name)
        ctype = content_type.split(";")[0].strip()
        if ctype == "application/merge-patch+json":
            func = merge_patch
        elif ctype == "application/strategic-merge-patch+json":
            func = strategic_merge_patch
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {ctype!r})",
            )
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(res, name)
        if status_only:
            body = {"status": body.get("status")}
        new = server_normalise(func(old, body))
        if not isinstance(new.get("metadata"), dict):
            raise self._invalid(res, name, "metadata", "Required value", "FieldValueRequired")
        if not status_only:
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
            self._validate_update(res, name, old, new)
            if res.plural == "resourcequotas":
                self._validate_quota(new)
        return self._store_update(res, ns, name, old, new)

    def _apply(self, res: Resource, ns: str, name: str, body, query: dict, status_only: bool) -> tuple:
        """Server-side apply (``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager``,
        ``force``), as https://kubernetes.io/docs/reference/using-api/server-side-apply/ defines it:
        creates the object when absent (201); records the manager's fields in
        ``metadata.managedFields`` (operation ``Apply``, FieldsV1); a field another manager owns and
        the configuration sets to a different value is a 409 conflict (``Apply failed with N
        conflict(s): conflict with "m": .path``, causes of type ``FieldManagerConflict``) unless
        ``force=true``, which takes it over; a field the manager applied before and now leaves out
        is removed unless another manager owns it. Only Apply operations own fields here: writes
        by create / update / merge patch record no manager (the real server records Update
        managers too)."""
        manager = (query.get("fieldManager") or [""])[0]
        if not manager:
            raise ApiError(
                400,
                "BadRequest",
                "PATCH, application/apply-patch+yaml: fieldManager is required for apply requests",
            )
        force = (query.get("force") or ["false"])[0] == "true"
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", f"the body of the request must be a {res.kind} object")
        if "apiVersion" not in body or "kind" not in body:
            raise ApiError(400, "BadRequest", "apiVersion and kind must be set in an apply configuration")
        config = self._check_body(res, ns, server_normalise(_drop_nulls(copy.deepcopy(body))))
        if config["metadata"].get("name", name) != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({config['metadata'].get('name')}) does not match the name on the URL ({name})",
            )
        config["metadata"]["name"] = name
        if config["metadata"].pop("managedFields", None):
            raise ApiError(400, "BadRequest", "metadata.managedFields must be nil")
        if status_only:
            config = {
                "apiVersion": res.api_version,
                "kind": res.kind,
                "metadata": config["metadata"],
                "status": config.get("status") or {},
            }
        elif res.plural in _STATUS_SUBRESOURCE:
            config.pop("status", None)
        mine = field_paths(config)
        entry = {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": res.api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(mine),
        }
        if status_only:
            entry["subresource"] = "status"
        old = self._store.get((res.plural, ns, name))
        if old is None:
            if status_only:
                raise _not_found(res, name)
            self._create(res, ns, config, query)
            stored = self._store[(res.plural, ns, name)]
            stored["metadata"]["managedFields"] = [entry]
            return 201, copy.deepcopy(stored)
        managed = copy.deepcopy(old["metadata"].get("managedFields") or [])
        others = [
            m
            for m in managed
            if (m.get("manager"), m.get("subresource")) != (manager, entry.get("subresource"))
        ]
        previous = next((m for m in managed if m not in others), None)
        conflicts = []
        for other in others:
            owned = fields_v1_paths(other.get("fieldsV1") or {})
            for path in sorted(mine & owned):
                if path[-1] != "." and _at_path(config, path) != _at_path(old, path):
                    conflicts.append((other, path))
        if conflicts and not force:
            raise self._apply_conflict(conflicts)
        for other in others:  # force: the conflicting fields change owner (same values stay shared)
            taken = {p for o, p in conflicts if o is other}
            if taken:
                other["fieldsV1"] = fields_v1(fields_v1_paths(other.get("fieldsV1") or {}) - taken)
        others = [m for m in others if m.get("fieldsV1")]
        new = strategic_merge_patch(copy.deepcopy(old), config)
        still_owned = set().union(*(fields_v1_paths(m["fieldsV1"]) for m in others)) if others else set()
        if previous is not None:
            # Whole list items first (their key field identifies them), then fields, deepest first.
            dropped = fields_v1_paths(previous.get("fieldsV1") or {}) - mine - still_owned
            for path in sorted(dropped, key=lambda p: (p[-1] != ".", -len(p), p)):
                _remove_path(new, path)
        new = server_normalise(new)
        kept = [
            entry if mf is previous else mf
            for mf in managed
            if mf is previous or any(mf is o for o in others)
        ]
        new["metadata"]["managedFields"] = kept if previous is not None else [*kept, entry]
        if not status_only:
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
            self._validate_update(res, name, old, new)
        if previous is not None and previous.get("fieldsV1") == entry["fieldsV1"]:
            # The manager's fields are the same: its entry keeps its time, so an apply that changes
            # nothing is not written (same resourceVersion, no event) by _store_update.
            entry["time"] = previous.get("time", entry["time"])
        return 200, self._store_update(res, ns, name, old, new)

    @staticmethod
    def _apply_conflict(conflicts: list[tuple[dict, tuple]]) -> ApiError:
        """The 409 an apply gets for fields other managers own (``Apply failed with N conflict(s)``,
        causes of type ``FieldManagerConflict``)."""

        def who(m: dict) -> str:
            if m.get("operation") == "Update":
                return f'"{m.get("manager")}" using {m.get("apiVersion")}'
            return f'"{m.get("manager")}"'

        if len(conflicts) == 1:
            message = f"Apply failed with 1 conflict: conflict with {who(conflicts[0][0])}: {field_path_text(conflicts[0][1])}"
        else:
            lines = []
            for m in sorted({c[0]["manager"]: c[0] for c in conflicts}.values(), key=lambda m: m["manager"]):
                lines.append(f"conflicts with {who(m)}:")
                lines += [f"- {field_path_text(p)}" for o, p in conflicts if o["manager"] == m["manager"]]
            message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
        causes = [
            {
                "type": "FieldManagerConflict",
                "message": f"conflict with {who(o)}",
                "field": field_path_text(p),
            }
            for o, p in conflicts
        ]
        return ApiError(409, "Conflict", message, {"causes": causes})

    def _conflict(self, res: Resource, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified_resource(res)[1]} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            {"name": name, "group": qualified_resource(res)[0], "kind": res.plural},
        )

    def _replace(self, res: Resource, ns: str, name: str, body, status_only: bool) -> dict:
        old = self._get(res, ns, name)
        new = self._check_body(res, ns, server_normalise(copy.deepcopy(body)))
        if new["metadata"].get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        rv = new["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(res, name)
        if status_only:
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        if not status_only:
            self._apply_defaults(res, new)
            self._validate(res, new, create=False)
            self._validate_update(res, name, old, new)
        return self._store_update(res, ns, name, old, new)
