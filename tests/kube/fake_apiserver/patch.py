"""JSON merge patch, strategic merge patch, and server-side apply's field sets."""

from __future__ import annotations

import copy
import json

from tests.kube.fake_apiserver.resources import _MERGE_KEYS, ApiError


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch, key: str = ""):
    """Merge patch, but lists with a known merge key are merged item by item on that key."""
    if isinstance(patch, list) and key in _MERGE_KEYS and isinstance(target, list):
        mkey = _MERGE_KEYS[key]
        result = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or mkey not in item:
                raise ApiError(
                    400, "BadRequest", f"strategic merge: item of {key} without merge key {mkey!r}"
                )
            for i, existing in enumerate(result):
                if isinstance(existing, dict) and existing.get(mkey) == item[mkey]:
                    result[i] = strategic_merge_patch(existing, item)
                    break
            else:
                result.append(copy.deepcopy(item))
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if any(k.startswith("$") for k in patch):
        raise ApiError(
            400, "BadRequest", "strategic merge: $patch directives are not supported by the fake API server"
        )
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if value is None:
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    return result


# -- server-side apply (https://kubernetes.io/docs/reference/using-api/server-side-apply/) ---------
APPLY_PATCH = "application/apply-patch+yaml"
# Fields the field manager never tracks (apiserver's fieldmanager strips them: type and identity
# meta, server-set metadata) and, for kinds with a status subresource, the whole status.
_UNTRACKED = {"apiVersion", "kind"}
_UNTRACKED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
}


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def field_paths(value, prefix: tuple = (), key: str = "") -> set[tuple]:
    """The leaf fields of an applied configuration, as FieldsV1 path segments (``f:<field>``,
    ``k:{"name":…}`` for an item of a list with a merge key, ``.`` for that item itself); other
    lists are atomic (one leaf)."""
    out: set[tuple] = set()
    if isinstance(value, dict) and value:
        for k, v in value.items():
            if not prefix and k in _UNTRACKED:
                continue
            if prefix == ("f:metadata",) and k in _UNTRACKED_META:
                continue
            out |= field_paths(v, (*prefix, f"f:{k}"), k)
        return out
    mkey = _MERGE_KEYS.get(key)
    if isinstance(value, list) and mkey and value and all(isinstance(i, dict) and mkey in i for i in value):
        for item in value:
            seg = "k:" + json.dumps({mkey: item[mkey]}, separators=(",", ":"))
            out.add((*prefix, seg, "."))
            out |= field_paths(item, (*prefix, seg), "")
        return out
    if prefix:
        out.add(prefix)
    return out


def fields_v1(paths: set[tuple]) -> dict:
    """Paths → the FieldsV1 tree (a leaf is ``{}``)."""
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for seg in path:
            node = node.setdefault(seg, {})
    return tree


def fields_v1_paths(tree: dict, prefix: tuple = ()) -> set[tuple]:
    out: set[tuple] = set()
    for seg, child in (tree or {}).items():
        if isinstance(child, dict) and child:
            out |= fields_v1_paths(child, (*prefix, seg))
        else:
            out.add((*prefix, seg))
    return out


_MISSING = object()


def _at_path(obj, path: tuple):
    """The value at a FieldsV1 path (``_MISSING`` when absent)."""
    node = obj
    for seg in path:
        if seg == ".":
            return node
        if seg.startswith("f:") and isinstance(node, dict):
            node = node.get(seg[2:], _MISSING)
        elif seg.startswith("k:") and isinstance(node, list):
            want = json.loads(seg[2:])
            node = next(
                (i for i in node if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                _MISSING,
            )
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _remove_path(obj, path: tuple) -> None:
    """Remove the field (or the keyed list item, for a path ending in ``.``) at ``path``."""
    if path and path[-1] == ".":
        parent, seg = _at_path(obj, path[:-2]), path[-2]
        if isinstance(parent, list):
            want = json.loads(seg[2:])
            parent[:] = [
                i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))
            ]
        return
    parent = _at_path(obj, path[:-1])
    if isinstance(parent, dict) and path[-1].startswith("f:"):
        parent.pop(path[-1][2:], None)


def field_path_text(path: tuple) -> str:
    """A path as structured-merge-diff prints it: ``.spec.containers[name="c"].image``."""
    text = ""
    for seg in path:
        if seg == ".":
            continue
        if seg.startswith("f:"):
            text += "." + seg[2:]
        else:
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(seg[2:]).items()) + "]"
    return text
