"""Name, label and field-error rules, as kube-apiserver's validation writes them."""

from __future__ import annotations

import json
import re

from tests.kube.fake_apiserver.resources import ApiError, Resource

# -- validation (k8s.io/apimachinery/pkg/util/validation/validation.go, pkg/apis/core/validation) -----
# Field errors as k8s.io/apimachinery/pkg/util/validation/field/errors.go writes them: each becomes a
# StatusCause {reason: "FieldValue<Type>", field: the path, message: ErrorBody()}, and
# apimachinery/pkg/api/errors NewInvalid joins "<field>: <body>" (several in "[…, …]") after
# '<Kind>.<group> "<name>" is invalid: '.
_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
    "must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_QNAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError: the message, examples and the regular expression."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """validation.IsDNS1123Label (≤ 63)."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_LABEL_FMT, value):
        errs.append(_regex_error(_DNS1123_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain (≤ 253)."""
    errs = [_max_len(253)] if len(value) > 253 else []
    if not re.fullmatch(_SUBDOMAIN_FMT, value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    """validation.IsDNS1035Label (≤ 63): Services."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_DNS1035_FMT, value):
        errs.append(_regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: label keys, taint keys — ``[prefix/]name``, name ≤ 63, prefix a
    DNS-1123 subdomain."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = [f"prefix part {m}" for m in dns1123_subdomain_errors(prefix)]
        if errs:
            return errs
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    errs = [f"name part {_max_len(63)}"] if len(name) > 63 else []
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue (≤ 63, may be empty)."""
    errs = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _show(value) -> str:
    """How field.Error prints a bad value (strings quoted, numbers bare, objects as JSON here)."""
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldErrors(list):
    """A field.ErrorList: ``add_*`` append StatusCauses ({reason, field, message})."""

    def _add(self, reason: str, field: str, message: str) -> None:
        self.append({"reason": reason, "message": message, "field": field})

    def invalid(self, field: str, value, detail: str) -> None:
        self._add("FieldValueInvalid", field, f"Invalid value: {_show(value)}: {detail}")

    def required(self, field: str, detail: str = "") -> None:
        self._add("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))

    def not_supported(self, field: str, value, valid: list[str]) -> None:
        supported = ", ".join(json.dumps(v) for v in valid)
        self._add(
            "FieldValueNotSupported",
            field,
            f"Unsupported value: {_show(value)}: supported values: {supported}",
        )

    def duplicate(self, field: str, value, detail: str = "") -> None:
        self._add(
            "FieldValueDuplicate",
            field,
            f"Duplicate value: {_show(value)}" + (f": {detail}" if detail else ""),
        )

    def unique_label_name(self, field: str, name: str, seen: set[str], *, empty_too: bool = False) -> None:
        """A list item's ``name``: required, a DNS-1123 label, unique in its list (``seen`` grows);
        ``empty_too``: a second empty name is a duplicate as well (as pod resourceClaims are checked)."""
        if not name:
            self.required(field)
        for msg in dns1123_label_errors(name) if name else []:
            self.invalid(field, name, msg)
        if (name or empty_too) and name in seen:
            self.duplicate(field, name)
        seen.add(name)

    def not_found(self, field: str, value, detail: str = "") -> None:
        self._add(
            "FieldValueNotFound", field, f"Not found: {_show(value)}" + (f": {detail}" if detail else "")
        )

    def forbidden(self, field: str, detail: str) -> None:
        self._add("FieldValueForbidden", field, f"Forbidden: {detail}")


def qualified_kind(res: Resource) -> tuple[str, str]:
    """(group, "<Kind>.<group>") — schema.GroupKind.String(); core kinds have no group."""
    group = res.api_version.split("/")[0] if "/" in res.api_version else ""
    return group, (f"{res.kind}.{group}" if group else res.kind)


def qualified_resource(res: Resource) -> tuple[str, str]:
    """(group, "<plural>.<group>") — schema.GroupResource.String(), as NotFound / AlreadyExists /
    Conflict / Forbidden messages name the object."""
    group = res.api_version.split("/")[0] if "/" in res.api_version else ""
    return group, (f"{res.plural}.{group}" if group else res.plural)


def invalid_error(res: Resource, name: str, causes: list[dict]) -> ApiError:
    """apimachinery/pkg/api/errors NewInvalid: 422, reason Invalid, the causes in details."""
    group, qual = qualified_kind(res)
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return ApiError(
        422,
        "Invalid",
        f'{qual} "{name}" is invalid: ' + (text if len(causes) == 1 else f"[{text}]"),
        {"name": name, "group": group, "kind": res.kind, "causes": list(causes)},
    )


def validate_labels(labels, field: str, errs: FieldErrors) -> None:
    """apimachinery/pkg/apis/meta/v1/validation ValidateLabels: every key a qualified name, every
    value a label value, both reported at the ``labels`` path."""
    if labels is None:
        return
    if not isinstance(labels, dict):
        errs.invalid(field, labels, "must be a map of strings")
        return
    for key, value in sorted(labels.items()):
        for msg in qualified_name_errors(str(key)):
            errs.invalid(field, key, msg)
        if not isinstance(value, str):
            errs.invalid(field, value, "must be a string")
            continue
        for msg in label_value_errors(value):
            errs.invalid(field, value, msg)


# Which name rule a kind's registry validates metadata.name with (ValidateObjectMeta's nameFn):
# Namespace ValidateNamespaceName = NameIsDNSLabel; Service = NameIsDNS1035Label; Pod, Node, Job,
# Deployment, ReplicaSet, DaemonSet, ResourceQuota, Event and the resource.k8s.io kinds =
# NameIsDNSSubdomain (pkg/apis/core/validation, pkg/apis/batch/validation, pkg/apis/apps/validation,
# pkg/apis/resource/validation).
_NAME_RULES = {"namespaces": dns1123_label_errors, "services": dns1035_label_errors}
