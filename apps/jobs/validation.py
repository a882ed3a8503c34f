"""What Kubernetes would check on the pod fields a user supplies, checked at submission (400).

A job's ``env``, ``command``, ``image``, ``tolerations`` and ``node_selector`` end up in the pod that
the push renders (apps/clusters/manifests/pod.py). Kubernetes would refuse an invalid one only at push time,
long after the user left, and a value of the wrong type (``"key": {"x": 1}``) crashed the scheduler's
request building with a 500. The rules follow the Kubernetes API reference and its validation code:

* Toleration (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#scheduling,
  ``pkg/apis/core/validation/validation.go`` ``ValidateTolerations``): ``key`` empty or a qualified
  name; ``operator`` ``Exists`` | ``Equal`` (empty = ``Equal``); an empty key needs ``Exists``;
  ``Exists`` takes no value; an ``Equal`` value is a label value; ``effect`` empty | ``NoSchedule`` |
  ``PreferNoSchedule`` | ``NoExecute``; ``tolerationSeconds`` an int64, only with ``NoExecute``.
* EnvVar name (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#environment-variables,
  ``IsEnvVarName`` in ``k8s.io/apimachinery/pkg/util/validation``): ``[-._a-zA-Z][-._a-zA-Z0-9]*``.
* Label keys and values (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set):
  a key is ``[prefix/]name``, prefix a DNS-1123 subdomain ≤ 253, name ≤ 63 of ``[A-Za-z0-9._-]``
  starting and ending alphanumeric; a value the same as a name, or empty.
* Container image (``validateContainers``): required, no leading or trailing whitespace.

Suanchi adds its own bounds (sizes, counts) so one job cannot store megabytes, and keeps the names
it or the device plugin owns: ``SUANCHI_*`` variables, the ``*_VISIBLE_DEVICES`` variables a container
runtime reads (``NVIDIA_VISIBLE_DEVICES=all`` would expose every card of the node), and the
``suanchi.io/`` taints (quarantine, maintenance, gray release: the platform's controls).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed

ENV_MAX_COUNT = 100
ENV_NAME_MAX_LENGTH = 256
ENV_VALUE_MAX_LENGTH = 32 * 1024
ENV_MAX_TOTAL_BYTES = 64 * 1024
COMMAND_MAX_ITEMS = 256
COMMAND_MAX_TOTAL_BYTES = 64 * 1024
TOLERATIONS_MAX = 32
NODE_SELECTOR_MAX = 32
LIST_MAX_ITEMS = 32  # required_features, allowed_vendors
LIST_ITEM_MAX_LENGTH = 60
INT64_MAX = 2**63 - 1

ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")

TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
PLATFORM_TAINT_PREFIX = "suanchi.io/"
PLATFORM_ENV_PREFIX = "SUANCHI_"


def _runtime_device_envs() -> frozenset[str]:
    from apps.inventory.vendors import ADAPTERS

    names = {adapter.visible_devices_env for adapter in ADAPTERS.values()}
    return frozenset(names | {"NVIDIA_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})


def qualified_name_error(key: Any) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (label key, taint key), or None."""
    if not isinstance(key, str) or not key:
        return _("must be a non-empty string")
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return _("the prefix before '/' is empty")
    if prefix and (
        len(prefix) > 253 or not all(_DNS_SUBDOMAIN_LABEL.match(part) for part in prefix.split("."))
    ):
        return _("the prefix %(prefix)r is not a DNS subdomain (lowercase, at most 253 characters)") % {
            "prefix": prefix[:60]
        }
    if not _LABEL_NAME.match(name):
        return _(
            "the name %(name)r must be at most 63 characters of A-Z, a-z, 0-9, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        ) % {"name": name[:70]}
    return None


def label_value_error(value: Any) -> str | None:
    if not isinstance(value, str):
        return _("must be a string")
    if not _LABEL_VALUE.match(value):
        return _(
            "%(value)r must be empty or at most 63 characters of A-Z, a-z, 0-9, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        ) % {"value": value[:70]}
    return None


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _env_errors(env: Any) -> list[str]:
    if not isinstance(env, Mapping):
        return [_("must be an object of NAME: value")]
    errors: list[str] = []
    if len(env) > ENV_MAX_COUNT:
        return [_("at most %(n)d variables (got %(got)d)") % {"n": ENV_MAX_COUNT, "got": len(env)}]
    reserved = _runtime_device_envs()
    total = 0
    for name, value in env.items():
        shown = str(name)[:60]
        if not isinstance(name, str) or not ENV_NAME.match(name) or len(name) > ENV_NAME_MAX_LENGTH:
            errors.append(
                _(
                    "%(name)r is not a valid variable name: letters, digits, '-', '.' and '_', not starting "
                    "with a digit, at most %(n)d characters"
                )
                % {"name": shown, "n": ENV_NAME_MAX_LENGTH}
            )
            continue
        if name.startswith(PLATFORM_ENV_PREFIX) or name in reserved:
            errors.append(
                _("%(name)s is set by Suanchi or the device plugin; a job cannot set it") % {"name": name}
            )
            continue
        if not isinstance(value, str):
            errors.append(_("%(name)s: the value must be a string") % {"name": name})
            continue
        if "\x00" in value:
            errors.append(_("%(name)s: the value contains a NUL character") % {"name": name})
            continue
        if len(value) > ENV_VALUE_MAX_LENGTH:
            errors.append(
                _("%(name)s: the value is longer than %(n)d characters")
                % {"name": name, "n": ENV_VALUE_MAX_LENGTH}
            )
            continue
        total += _utf8(name) + _utf8(value)
    if total > ENV_MAX_TOTAL_BYTES:
        errors.append(
            _("the variables take %(got)d bytes; the limit is %(n)d bytes")
            % {"got": total, "n": ENV_MAX_TOTAL_BYTES}
        )
    return errors


def _command_errors(command: Any) -> list[str]:
    if not isinstance(command, list | tuple):
        return [_("must be a list of strings")]
    if len(command) > COMMAND_MAX_ITEMS:
        return [_("at most %(n)d arguments (got %(got)d)") % {"n": COMMAND_MAX_ITEMS, "got": len(command)}]
    total = 0
    for index, part in enumerate(command):
        if not isinstance(part, str):
            return [_("argument %(i)d must be a string") % {"i": index}]
        if "\x00" in part:
            return [_("argument %(i)d contains a NUL character") % {"i": index}]
        total += _utf8(part)
    if total > COMMAND_MAX_TOTAL_BYTES:
        return [
            _("the command takes %(got)d bytes; the limit is %(n)d bytes")
            % {"got": total, "n": COMMAND_MAX_TOTAL_BYTES}
        ]
    return []


def toleration_errors(toleration: Any) -> list[str]:
    """Why one toleration would be refused by Kubernetes (or by Suanchi's taint policy)."""
    if not isinstance(toleration, Mapping):
        return [_("must be an object with key, operator, value, effect, tolerationSeconds")]
    unknown = sorted(str(k)[:40] for k in toleration if k not in TOLERATION_KEYS)
    if unknown:
        return [_("unknown fields: %(fields)s") % {"fields": ", ".join(unknown)}]
    errors: list[str] = []
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    value = toleration.get("value")
    effect = toleration.get("effect") or ""
    seconds = toleration.get("tolerationSeconds")
    if not isinstance(key, str):
        errors.append(_("key: must be a string"))
    elif key:
        problem = qualified_name_error(key)
        if problem:
            errors.append(_("key: %(problem)s") % {"problem": problem})
        elif key.startswith(PLATFORM_TAINT_PREFIX):
            errors.append(
                _("key: %(key)s is a Suanchi taint (quarantine, maintenance, gray release); use gray_opt_in")
                % {"key": key}
            )
    if operator not in TOLERATION_OPERATORS:
        errors.append(_("operator: must be Exists or Equal (got %(got)r)") % {"got": str(operator)[:40]})
    elif not key and operator != "Exists":
        errors.append(_("operator: must be Exists when key is empty"))
    elif not key:
        errors.append(
            _("key: an empty key with Exists tolerates every taint, the platform's too; name the key")
        )
    if value not in (None, ""):
        if operator == "Exists":
            errors.append(_("value: must be empty when operator is Exists"))
        else:
            problem = label_value_error(value)
            if problem:
                errors.append(_("value: %(problem)s") % {"problem": problem})
    if effect not in TAINT_EFFECTS:
        errors.append(
            _("effect: must be empty, NoSchedule, PreferNoSchedule or NoExecute (got %(got)r)")
            % {"got": str(effect)[:40]}
        )
    if seconds is not None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int)
            or not -INT64_MAX - 1 <= seconds <= INT64_MAX
        ):
            errors.append(_("tolerationSeconds: must be an integer (int64)"))
        elif effect != "NoExecute":
            errors.append(_("tolerationSeconds: only with effect NoExecute"))
    return errors


def _tolerations_errors(tolerations: Any) -> list[str]:
    if not isinstance(tolerations, list | tuple):
        return [_("must be a list of tolerations")]
    if len(tolerations) > TOLERATIONS_MAX:
        return [_("at most %(n)d tolerations") % {"n": TOLERATIONS_MAX}]
    errors = []
    for index, toleration in enumerate(tolerations):
        errors += [
            _("item %(i)d: %(error)s") % {"i": index, "error": e} for e in toleration_errors(toleration)
        ]
    return errors


def _node_selector_errors(selector: Any) -> list[str]:
    if not isinstance(selector, Mapping):
        return [_("must be an object of label key: value")]
    if len(selector) > NODE_SELECTOR_MAX:
        return [_("at most %(n)d labels") % {"n": NODE_SELECTOR_MAX}]
    errors = []
    for key, value in selector.items():
        problem = qualified_name_error(key)
        if problem:
            errors.append(_("key %(key)r: %(problem)s") % {"key": str(key)[:60], "problem": problem})
            continue
        problem = label_value_error(value)
        if problem:
            errors.append(_("%(key)s: %(problem)s") % {"key": key, "problem": problem})
    return errors


def _string_list_errors(items: Any) -> list[str]:
    if not isinstance(items, list | tuple):
        return [_("must be a list of strings")]
    if len(items) > LIST_MAX_ITEMS:
        return [_("at most %(n)d items") % {"n": LIST_MAX_ITEMS}]
    if any(not isinstance(i, str) or not i or len(i) > LIST_ITEM_MAX_LENGTH for i in items):
        return [
            _("each item is a non-empty string of at most %(n)d characters") % {"n": LIST_ITEM_MAX_LENGTH}
        ]
    return []


def _image_errors(image: Any) -> list[str]:
    if not isinstance(image, str) or not image:
        return [_("an image reference is required")]
    if any(ch.isspace() for ch in image):
        return [_("an image reference has no spaces")]
    return []


_CHECKS = {
    "image": _image_errors,
    "command": _command_errors,
    "env": _env_errors,
    "tolerations": _tolerations_errors,
    "node_selector": _node_selector_errors,
    "required_features": _string_list_errors,
    "allowed_vendors": _string_list_errors,
}


def pod_fields_validate(fields: Mapping[str, Any]) -> None:
    """Raise ValidationFailed (400, errors per field) for what Kubernetes would refuse in the pod."""
    errors: dict[str, list[str]] = {}
    for name, check in _CHECKS.items():
        if name in fields and fields[name] is not None:
            problems = check(fields[name])
            if problems:
                errors[name] = problems
    if errors:
        # The same message as the scheduler's request checks (the submit form recognises it).
        raise ValidationFailed("The request is invalid.", details=errors)
