"""A test-side ``kustomize build`` for the subset platform/kubernetes uses (kustomize is not installed here).

Supported, with kustomize's semantics: ``resources`` (files, and directories holding a kustomization that
are not above the current one: kustomize refuses a parent as a cycle), ``namespace``, ``images``
(``name`` → ``newName`` / ``newTag`` / ``digest`` on container and init-container images) and ``patches``
given as strategic-merge patches (inline ``patch`` or ``path``) whose target is their own kind and name.
Strategic merge: maps merge recursively, ``null`` deletes a key, lists of named items (containers, env,
volumes, ports, ...) merge by ``name``, other lists are replaced.
Anything else in a kustomization is refused, so a field this renderer would silently ignore fails the test.
Reference: https://kubectl.docs.kubernetes.io/references/kustomize/kustomization/
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
# Lists merged by "name" in the Kubernetes strategic-merge schema (patchMergeKey: name) for what we patch.
MERGE_BY_NAME = {
    "containers",
    "initContainers",
    "env",
    "volumes",
    "volumeMounts",
    "ports",
    "imagePullSecrets",
}


class KustomizeError(ValueError):
    pass


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            elif k in merged:
                merged[k] = strategic_merge(merged[k], v, k)
            else:
                merged[k] = copy.deepcopy(v)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_BY_NAME:
        merged_list = [copy.deepcopy(item) for item in base]
        index = {item.get("name"): i for i, item in enumerate(merged_list)}
        for item in patch:
            name = item.get("name")
            if name in index:
                merged_list[index[name]] = strategic_merge(merged_list[index[name]], item, key)
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(patch)


def _set_image(image: str, rules: list[dict[str, str]]) -> str:
    name, tag = image, ""
    if "@" in name:
        name = name.split("@", 1)[0]
    elif ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    for rule in rules:
        if rule["name"] != name:
            continue
        new_name = rule.get("newName", name)
        if rule.get("digest"):
            return f"{new_name}@{rule['digest']}"
        new_tag = rule.get("newTag", tag)
        return f"{new_name}:{new_tag}" if new_tag else new_name
    return image


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    return spec.get("template", {}).get("spec")


def build(directory: Path, _seen: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    directory = directory.resolve()
    for root in _seen:
        if root == directory or root.is_relative_to(directory):
            raise KustomizeError(f"cycle detected: {directory} contains the kustomization root {root}")
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects.extend(build(target, (*_seen, directory)))
        else:
            if not target.is_relative_to(directory):
                raise KustomizeError(f"{entry}: a file outside the kustomization root {directory}")
            objects.extend(_documents(target))
    for item in kustomization.get("patches", []):
        unknown = set(item) - {"patch", "path"}
        if unknown:
            raise KustomizeError(f"{directory}: unsupported patch fields {sorted(unknown)}")
        docs = [yaml.safe_load(item["patch"])] if "patch" in item else _documents(directory / item["path"])
        for patch in docs:
            matches = [
                i
                for i, obj in enumerate(objects)
                if obj["kind"] == patch["kind"] and obj["metadata"]["name"] == patch["metadata"]["name"]
            ]
            if len(matches) != 1:
                raise KustomizeError(
                    f"patch {patch['kind']}/{patch['metadata']['name']}: {len(matches)} targets"
                )
            objects[matches[0]] = strategic_merge(objects[matches[0]], patch)
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj.setdefault("metadata", {})["namespace"] = namespace
            for subject in (
                obj.get("subjects", []) if obj["kind"] in {"ClusterRoleBinding", "RoleBinding"} else []
            ):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
    rules = kustomization.get("images", [])
    if rules:
        for obj in objects:
            pod = _pod_spec(obj)
            for container in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
                container["image"] = _set_image(container["image"], rules)
    keys = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects]
    duplicates = {k for k in keys if keys.count(k) > 1}
    if duplicates:
        raise KustomizeError(f"{directory}: duplicate objects {sorted(duplicates)}")
    return objects
