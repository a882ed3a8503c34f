"""Runtime compatibility precheck: can an image built for CUDA / CANN / ROCm / DTK run on this node?

Pure functions over ``apps/inventory/data/runtime-compat.yaml`` (loaded once) plus a thin adapter for
Node rows. Every answer names the table row it used and that row's source.

Answers (CompatResult):

* ``verified=True``: a published table row decided; ``ok`` is that row's answer.
* ``verified=False``: no row decided. ``ok=True`` means the tables have nothing to check against and
  Suanchi lets it through, flagged (Hygon DTK has no public matrix; a chip family or driver line the
  tables do not cover). ``ok=False`` means the check could not start: the node's driver version is
  unknown, or the requested runtime version is not in the table.

NVIDIA: by default the check is strict (``allow_minor_version_compat=False``): the driver must be at
least the one Table 3 of the CUDA release notes pairs with the toolkit (the full feature set). With
``allow_minor_version_compat=True`` a driver at or above the major family's minor-version
compatibility minimum is accepted too (limited feature set; newer-toolkit PTX cannot be JIT-compiled).

Huawei: Ascend pairings are "matching" versions, not minimums. A driver in the same major.minor line
as the paired one and not older is accepted; an older one is refused; a newer line is not verified.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from apps.catalog.models import Vendor
from apps.core.errors import ValidationFailed
from apps.core.stored_text import stored

DATA_PATH = Path(__file__).resolve().parent / "data" / "runtime-compat.yaml"

RUNTIME_VENDOR = {"cuda": Vendor.NVIDIA, "cann": Vendor.HUAWEI, "rocm": Vendor.AMD, "dtk": Vendor.HYGON}
RUNTIME_LABEL = {"cuda": "CUDA", "cann": "CANN", "rocm": "ROCm", "dtk": "DTK"}
_NODE_PHRASE = {
    Vendor.NVIDIA: stored("an NVIDIA node"),
    Vendor.HUAWEI: stored("a Huawei Ascend node"),
    Vendor.AMD: stored("an AMD node"),
    Vendor.HYGON: stored("a Hygon DCU node"),
}
ACCEPTED_FORMS = (
    "'cuda 12.4', 'CUDA 12.4.1', 'cuda>=12.2', 'cann 8.0.RC3', 'cann 8.0.0', 'rocm 6.2', 'dtk 24.04'"
)
# Reasons end up in job state reasons and scheduler explanations ("runtime precheck failed: …"):
# stored texts, shown in the reader's language (apps.core.stored_text); the API keeps the English.
DRIVER_UNKNOWN = stored("driver version unknown on this node")
MVC_CAVEAT = stored("limited feature set; PTX JIT from a newer toolkit fails with error 222")
DRIVER_NOT_A_VERSION = stored("driver version %(value)s on this node is not a version number")
VENDOR_MISMATCH = stored("%(runtime)s images need %(node)s; this node has %(vendor)s devices")
NOT_IN_TABLE = stored("%(requirement)s is not in the compatibility table (known: %(known)s)")
NOT_IN_TABLE_SERIES = stored(
    "%(requirement)s is not in the compatibility table (known %(series)s releases: %(known)s)"
)
NO_VOLTA = stored(
    "%(requirement)s does not support Volta GPUs (%(model)s): V100 workloads need a CUDA 12.x image"
)
DRIVER_NEW_ENOUGH = stored("driver %(driver)s >= %(required)s required by %(requirement)s")
DRIVER_TOO_OLD = stored("driver %(driver)s < %(required)s required by %(requirement)s")
MVC_RUNS = stored(
    "%(strict)s, but >= %(floor)s (CUDA %(family)s minor-version compatibility minimum): "
    "runs under CUDA minor-version compatibility (%(caveat)s)"
)
MVC_ALSO_MINIMUM = stored("%(strict)s (also the CUDA %(family)s minor-version compatibility minimum)")
# The refusals of CANN and ROCm (a failed precheck), without and with the host's runtime version.
CANN_MISMATCH = stored("driver %(driver)s does not match %(requirement)s (pairs with %(pairing)s)")
CANN_MISMATCH_HOST = stored(
    "driver %(driver)s does not match %(requirement)s (pairs with %(pairing)s) (host CANN %(host)s)"
)
AMDGPU_OTHER_ROCM = stored("amdgpu %(driver)s supports ROCm %(supported)s; not %(requirement)s")
AMDGPU_OTHER_ROCM_HOST = stored(
    "amdgpu %(driver)s supports ROCm %(supported)s; not %(requirement)s (host ROCm %(host)s)"
)
KMD_OTHER_ROCM = stored("KMD %(driver)s supports ROCm user space %(supported)s; not %(requirement)s")
KMD_OTHER_ROCM_HOST = stored(
    "KMD %(driver)s supports ROCm user space %(supported)s; not %(requirement)s (host ROCm %(host)s)"
)
KMD_TOO_FAR = stored("KMD %(driver)s is %(distance)s releases away from %(requirement)s; ROCm supports +/-2")
KMD_TOO_FAR_HOST = stored(
    "KMD %(driver)s is %(distance)s releases away from %(requirement)s; ROCm supports +/-2 (host ROCm %(host)s)"
)
MVC_BELOW = stored("%(strict)s, and < %(floor)s, the CUDA %(family)s minor-version compatibility minimum")


@functools.cache
def compat_data() -> dict[str, Any]:
    with open(DATA_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@dataclass(frozen=True)
class CompatResult:
    ok: bool
    reason: str
    rule: str = ""  # the table row used
    source: str = ""  # that row's source
    verified: bool = True  # False: no table row decided (see the module docstring)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ versions

_PRE_RELEASE = {"alpha": 0, "beta": 1, "rc": 2}
_COMPONENT = re.compile(r"(alpha|beta|rc)(\d*)")
_KEY_LENGTH = 6


def version_key(text: str) -> tuple[tuple[int, int, int], ...]:
    """Sortable key for driver / runtime versions, pre-releases first: 24.1.rc2 < 24.1.0 < 24.1.1.

    Components are numbers or alpha/beta/rc tags ("8.0.RC2.alpha002"); a parenthesised suffix is
    ignored ("25.0.rc1(.1)"); missing components count as 0 (24.1 == 24.1.0). ValueError otherwise.
    """
    cleaned = re.sub(r"\(.*?\)", "", text or "").strip().casefold().removeprefix("v")
    if not cleaned:
        raise ValueError(f"not a version: {text!r}")
    key: list[tuple[int, int, int]] = []
    for part in cleaned.split("."):
        if part.isdigit():
            key.append((1, int(part), 0))
            continue
        tag = _COMPONENT.fullmatch(part)
        if not tag:
            raise ValueError(f"not a version: {text!r}")
        key.append((0, _PRE_RELEASE[tag.group(1)], int(tag.group(2) or 0)))
    key.extend([(1, 0, 0)] * (_KEY_LENGTH - len(key)))
    return tuple(key)


def version_line(text: str) -> tuple[int, int] | None:
    """The major.minor line of a version ("24.1.rc2" -> (24, 1)); None when it has no numeric minor."""
    key = version_key(text)
    if key[0][0] == 1 and key[1][0] == 1:
        return key[0][1], key[1][1]
    return None


def _parse_driver(text: str | None) -> tuple[str | None, CompatResult | None]:
    if text is None or not str(text).strip():
        return None, CompatResult(ok=False, reason=DRIVER_UNKNOWN, verified=False)
    value = str(text).strip()
    try:
        version_key(value)
    except ValueError:
        return None, CompatResult(
            ok=False, reason=DRIVER_NOT_A_VERSION % {"value": repr(value)}, verified=False
        )
    return value, None


# ------------------------------------------------------------------ requirements


@dataclass(frozen=True)
class Requirement:
    runtime: str  # cuda | cann | rocm | dtk
    version: str  # as typed (trimmed)
    operator: str  # ">=" or "" (both mean: at least this runtime version in the image)

    @property
    def label(self) -> str:
        return f"{RUNTIME_LABEL[self.runtime]} {self.version}"


_REQUIREMENT = re.compile(r"^\s*(cuda|cann|rocm|dtk)\s*(>=|==|=|-)?\s*v?(\d[0-9A-Za-z.]*)\s*$", re.IGNORECASE)


def parse_requirement(text: str) -> Requirement:
    match = _REQUIREMENT.match(text or "")
    if match:
        runtime, operator, version = match.group(1).casefold(), match.group(2) or "", match.group(3)
        try:
            version_key(version)
        except ValueError:
            match = None
        else:
            if runtime in ("cuda", "rocm") and not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
                match = None
    if not match:
        raise ValidationFailed(
            f"cannot read the runtime requirement {text!r}; accepted forms: {ACCEPTED_FORMS}",
            details={"requirement": [f"accepted forms: {ACCEPTED_FORMS}"]},
        )
    return Requirement(runtime=runtime, version=version, operator=">=" if operator == ">=" else "")


def _normalise_vendor(vendor: str) -> str:
    value = (vendor or "").strip().casefold()
    for choice in Vendor:
        if value in (choice.value, choice.label.casefold()):
            return choice.value
    raise ValidationFailed(
        f"unknown vendor {vendor!r}; use one of {', '.join(Vendor.values)}",
        details={"vendor": ["unknown vendor"]},
    )


# ------------------------------------------------------------------ entry point


def precheck(
    *,
    vendor: str,
    driver_version: str | None,
    requirement: str,
    cann_version: str | None = None,
    rocm_version: str | None = None,
    dtk_version: str | None = None,
    chip: str | None = None,
    device_model_name: str | None = None,
    allow_minor_version_compat: bool = False,
) -> CompatResult:
    """Can an image that needs ``requirement`` run on a node with these driver/runtime versions?

    ``cann_version`` / ``rocm_version`` / ``dtk_version`` are the versions installed on the host; the
    image brings its own runtime, so they only appear in reasons. ``chip`` (Ascend chip or model name,
    e.g. "910B3") picks the CANN pairing family; ``device_model_name`` enables the Volta rule (no
    CUDA 13 on V100). Raises ValidationFailed for an unreadable requirement or an unknown vendor.
    """
    req = parse_requirement(requirement)
    node_vendor = _normalise_vendor(vendor)
    needed = RUNTIME_VENDOR[req.runtime]
    if node_vendor != needed:
        return CompatResult(
            ok=False,
            reason=VENDOR_MISMATCH
            % {
                "runtime": RUNTIME_LABEL[req.runtime],
                "node": _NODE_PHRASE[needed],
                "vendor": Vendor(node_vendor).label,
            },
            rule=f"{RUNTIME_LABEL[req.runtime]} runs on {Vendor(needed).label} devices only",
        )
    if req.runtime == "cuda":
        return _cuda(req, driver_version, device_model_name, allow_minor_version_compat)
    if req.runtime == "cann":
        return _cann(req, driver_version, chip, cann_version)
    if req.runtime == "rocm":
        return _rocm(req, driver_version, rocm_version)
    return _dtk(req, driver_version, dtk_version)


# ------------------------------------------------------------------ NVIDIA CUDA


def _cuda_table() -> list[dict[str, Any]]:
    return compat_data()["nvidia"]["cuda_toolkit_driver_table"]


def _minimum(text: str) -> str:
    match = re.search(r">=\s*([0-9][0-9.]*[0-9])", str(text))
    if not match:
        raise ValueError(f"no minimum in {text!r}")
    return match.group(1)


def _series(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _cuda_row(version: str) -> dict[str, Any] | None:
    rows = _cuda_table()
    if version.count(".") == 2:
        return next((r for r in rows if version_key(r["toolkit_version"]) == version_key(version)), None)
    same = [r for r in rows if _series(r["toolkit_version"]) == version]
    ga = [r for r in same if re.search(r"\bGA\b", r["release"])]
    pool = ga or same
    return min(pool, key=lambda r: version_key(r["toolkit_version"])) if pool else None


def _cuda_rule(row: dict[str, Any]) -> str:
    return (
        f"{row['release']}: toolkit {row['toolkit_version']} needs Linux x86_64 driver "
        f"{row['toolkit_driver_linux_x86_64']} (cuda_toolkit_driver_table)"
    )


def _mvc_family(major: int) -> tuple[str, dict[str, Any]] | None:
    """The family's minor-version-compatibility minimum: the stricter of the YAML's stated minimum
    (its 'use >=X' note when it has one) and the driver the family's first GA toolkit shipped with."""
    family = next(
        (f for f in compat_data()["nvidia"]["minor_version_compatibility"] if f["family"] == f"{major}.x"),
        None,
    )
    if family is None:
        return None
    text = str(family["min_driver"])
    use = re.search(r"use\s*>=\s*([0-9][0-9.]*[0-9])", text)
    floor = use.group(1) if use else _minimum(text)
    ga = _cuda_row(f"{major}.0")
    if ga is not None:
        floor = max(floor, _minimum(ga["toolkit_driver_linux_x86_64"]), key=version_key)
    return floor, family


_VOLTA = re.compile(r"\bv100\b", re.IGNORECASE)


def _cuda(
    req: Requirement, driver_version: str | None, device_model_name: str | None, allow_mvc: bool
) -> CompatResult:
    version = req.version
    row = _cuda_row(version)
    if row is None:
        known_series = sorted({_series(r["toolkit_version"]) for r in _cuda_table()}, key=version_key)
        if version.count(".") == 2 and version_line(version) and _series(version) in known_series:
            releases = sorted(
                (
                    r["toolkit_version"]
                    for r in _cuda_table()
                    if _series(r["toolkit_version"]) == _series(version)
                ),
                key=version_key,
            )
            reason = NOT_IN_TABLE_SERIES % {
                "requirement": req.label,
                "series": _series(version),
                "known": ", ".join(releases),
            }
        else:
            reason = NOT_IN_TABLE % {"requirement": req.label, "known": ", ".join(known_series)}
        return CompatResult(
            ok=False,
            reason=reason,
            rule="cuda_toolkit_driver_table",
            source=_cuda_table()[0]["source"],
            verified=False,
        )
    major = int(version.split(".")[0])
    if device_model_name and major >= 13 and _VOLTA.search(device_model_name.replace("-", " ")):
        return CompatResult(
            ok=False,
            reason=NO_VOLTA % {"requirement": req.label, "model": device_model_name},
            rule="mvc_caveats: CUDA 13.0 removed offline compilation/library support for Maxwell, Pascal and Volta",
            source=_caveat_source("Volta"),
        )
    driver, problem = _parse_driver(driver_version)
    if problem:
        return problem
    required = _minimum(row["toolkit_driver_linux_x86_64"])
    rule, source = _cuda_rule(row), row["source"]
    if version_key(driver) >= version_key(required):
        return CompatResult(
            ok=True,
            reason=DRIVER_NEW_ENOUGH % {"driver": driver, "required": required, "requirement": req.label},
            rule=rule,
            source=source,
        )
    strict_reason = DRIVER_TOO_OLD % {"driver": driver, "required": required, "requirement": req.label}
    if not allow_mvc or major < 11:
        return CompatResult(ok=False, reason=strict_reason, rule=rule, source=source)
    family = _mvc_family(major)
    if family is None:
        return CompatResult(ok=False, reason=strict_reason, rule=rule, source=source)
    floor, family_row = family
    mvc_rule = (
        f"{rule}; minor_version_compatibility {family_row['family']}: driver {family_row['min_driver']}"
    )
    mvc_source = f"{source}; {family_row['source']}"
    if version_key(driver) >= version_key(floor):
        return CompatResult(
            ok=True,
            reason=MVC_RUNS
            % {"strict": strict_reason, "floor": floor, "family": family_row["family"], "caveat": MVC_CAVEAT},
            rule=mvc_rule,
            source=mvc_source,
        )
    if version_key(floor) == version_key(required):
        why = MVC_ALSO_MINIMUM % {"strict": strict_reason, "family": family_row["family"]}
    else:
        why = MVC_BELOW % {"strict": strict_reason, "floor": floor, "family": family_row["family"]}
    return CompatResult(ok=False, reason=why, rule=mvc_rule, source=mvc_source)


def _caveat_source(word: str) -> str:
    for caveat in compat_data()["nvidia"]["mvc_caveats"]:
        if word in caveat["fact"]:
            return caveat["source"]
    return ""


# ------------------------------------------------------------------ Huawei CANN / Ascend HDK

_HDK = re.compile(r"HDK\s+([0-9][0-9A-Za-z.]*)")


@dataclass(frozen=True)
class _Target:
    version: str  # driver / HDK version as published ("24.1.rc2", "25.5.x")
    and_later: bool = False


def _chip_families(chip: str | None) -> set[str] | None:
    """Pair keys (lower case) that apply to a chip; None when the chip is unknown (all apply)."""
    if not chip or not chip.strip():
        return None
    text = chip.casefold()
    if "910b" in text or re.search(r"\ba2\b", text):
        return {"910b", "a2/a3", "any"}
    if re.search(r"\ba3\b", text):
        return {"a2/a3", "any"}
    if "310p" in text:
        return {"310p", "any"}
    return {"any"}


def _targets(entry: dict[str, Any]) -> list[_Target]:
    if entry.get("driver"):
        return [_Target(str(entry["driver"]))]
    hdks = entry.get("hdk")
    texts = hdks if isinstance(hdks, list) else [hdks] if hdks else []
    targets = []
    for text in texts:
        match = _HDK.search(str(text))
        if match:
            targets.append(_Target(match.group(1), and_later="and later" in str(text)))
    return targets


def _describe(entry: dict[str, Any]) -> str:
    hdk = entry.get("hdk")
    hdk_text = " / ".join(str(h) for h in hdk) if isinstance(hdk, list) else str(hdk or "")
    return f"{hdk_text}, driver {entry['driver']}" if entry.get("driver") else hdk_text


def _target_outcome(driver: str, target: _Target) -> str:
    """'ok', 'newer' (a later line than paired: not verified) or 'no'."""
    if target.version.casefold().endswith(".x"):
        line = tuple(int(p) for p in target.version.split(".")[:2])
        dline = version_line(driver)
        if dline == line:
            return "ok"
        return "newer" if dline is not None and dline > line else "no"
    if target.and_later:
        return "ok" if version_key(driver) >= version_key(target.version) else "no"
    dline, tline = version_line(driver), version_line(target.version)
    if dline is not None and tline is not None and dline > tline:
        return "newer"
    if dline == tline and version_key(driver) >= version_key(target.version):
        return "ok"
    return "no"


def _cann(
    req: Requirement, driver_version: str | None, chip: str | None, cann_version: str | None
) -> CompatResult:
    rows = compat_data()["huawei_ascend"]["cann_hdk_pairs"]
    row = next((r for r in rows if str(r["cann"]).casefold() == req.version.casefold()), None)
    if row is None:
        return CompatResult(
            ok=False,
            reason=NOT_IN_TABLE
            % {"requirement": req.label, "known": ", ".join(str(r["cann"]) for r in rows)},
            rule="cann_hdk_pairs",
            source=rows[0]["source"],
            verified=False,
        )
    driver, problem = _parse_driver(driver_version)
    if problem:
        return problem
    families = _chip_families(chip)
    entries = {str(k).casefold(): v for k, v in row["pairs"].items()}
    relevant = {k: v for k, v in entries.items() if families is None or k in families}
    descriptions = {k: _describe(v) for k, v in relevant.items()}
    if len(set(descriptions.values())) == 1:
        pairing = next(iter(descriptions.values()))
    else:
        pairing = "; ".join(f"{k}: {d}" for k, d in descriptions.items())
    rule = f"cann_hdk_pairs CANN {row['cann']}: {pairing or ', '.join(row['pairs'])}"
    host = f" (host CANN {cann_version})" if cann_version else ""
    if not relevant:
        return CompatResult(
            ok=True,
            reason=(
                f"{req.label} has pairings for {', '.join(str(k) for k in row['pairs'])} only; none for chip {chip}: "
                f"driver {driver} not verified{host}"
            ),
            rule=rule,
            source=row["source"],
            verified=False,
        )
    outcomes = {}
    for key, entry in relevant.items():
        results = [_target_outcome(driver, t) for t in _targets(entry)]
        outcomes[key] = "ok" if "ok" in results else "newer" if "newer" in results else "no"
    if all(o == "ok" for o in outcomes.values()):
        return CompatResult(
            ok=True,
            reason=f"driver {driver} matches {req.label} (pairs with {pairing}){host}",
            rule=rule,
            source=row["source"],
        )
    if all(o == "no" for o in outcomes.values()):
        return CompatResult(
            ok=False,
            reason=(CANN_MISMATCH_HOST if cann_version else CANN_MISMATCH)
            % {"driver": driver, "requirement": req.label, "pairing": pairing, "host": cann_version},
            rule=rule,
            source=row["source"],
        )
    if all(o in ("ok", "newer") for o in outcomes.values()):
        why = f"driver {driver} is a newer HDK line than {req.label} pairs with ({pairing})"
    else:
        why = f"driver {driver} pairs with {req.label} only for some chip families ({pairing}); chip unknown"
    return CompatResult(
        ok=True,
        reason=f"{why}; Huawei publishes matching versions, not ranges: not verified{host}",
        rule=rule,
        source=row["source"],
        verified=False,
    )


# ------------------------------------------------------------------ AMD ROCm / amdgpu


def _rocm_series(text: str) -> str:
    return ".".join(str(text).removesuffix(".x").split(".")[:2])


def _rocm_matches(requested: str, entry: str) -> bool:
    """'6.2' or '6.2.4' against '6.2.x' (series) or '7.14.0' (one release; '7.14' means 7.14.0)."""
    entry = str(entry)
    if entry.endswith(".x"):
        return _rocm_series(requested) == _rocm_series(entry)
    return version_key(requested) == version_key(entry)


def _rocm(req: Requirement, driver_version: str | None, rocm_version: str | None) -> CompatResult:
    amd = compat_data()["amd_rocm"]
    amdgpu_rows = [r for r in amd["amdgpu_driver_rocm"] if "amdgpu" in r]
    kmd = amd["kmd_userspace_support"]
    matrix: dict[str, list[str]] = kmd["matrix_rocm_6_3_docs"]
    known = {_rocm_series(v) for r in amdgpu_rows for v in r["rocm"]}
    known |= {_rocm_series(k) for k in matrix} | {_rocm_series(v) for vs in matrix.values() for v in vs}
    ordered = sorted(known, key=version_key)
    if _rocm_series(req.version) not in known:
        return CompatResult(
            ok=False,
            reason=NOT_IN_TABLE % {"requirement": req.label, "known": ", ".join(ordered)},
            rule="amd_rocm",
            source=kmd["source"],
            verified=False,
        )
    driver, problem = _parse_driver(driver_version)
    if problem:
        return problem
    host = f" (host ROCm {rocm_version})" if rocm_version else ""
    major = version_key(driver)[0][1]
    if major >= 30:  # decoupled amdgpu driver numbering (ROCm 6.4 on)
        row = next(
            (
                r
                for r in amdgpu_rows
                if any(version_key(v.strip()) == version_key(driver) for v in str(r["amdgpu"]).split("/"))
            ),
            None,
        )
        if row is None:
            known_drivers = ", ".join(v.strip() for r in amdgpu_rows for v in str(r["amdgpu"]).split("/"))
            return CompatResult(
                ok=True,
                reason=(
                    f"amdgpu {driver} is not in the amdgpu/ROCm table (known: {known_drivers}); "
                    f"cannot verify {req.label}{host}"
                ),
                rule="amdgpu_driver_rocm",
                source=amdgpu_rows[0]["source"],
                verified=False,
            )
        supported = ", ".join(str(v) for v in row["rocm"])
        rule = f"amdgpu_driver_rocm {row['amdgpu']}: ROCm {supported}"
        if any(_rocm_matches(req.version, v) for v in row["rocm"]):
            return CompatResult(
                ok=True,
                reason=f"amdgpu {driver} supports {req.label} (ROCm {supported}){host}",
                rule=rule,
                source=row["source"],
            )
        return CompatResult(
            ok=False,
            reason=(AMDGPU_OTHER_ROCM_HOST if rocm_version else AMDGPU_OTHER_ROCM)
            % {"driver": driver, "supported": supported, "requirement": req.label, "host": rocm_version},
            rule=rule,
            source=row["source"],
        )
    # Before ROCm 6.4 the kernel driver carried a ROCm-like version (e.g. 6.3.6): KMD <-> user space.
    series = _rocm_series(driver)
    tested = matrix.get(f"{series}.x")
    if tested is not None:
        supported = ", ".join(tested)
        rule = f"kmd_userspace_support KMD {series}.x: ROCm user space {supported}"
        if any(_rocm_matches(req.version, v) for v in tested):
            return CompatResult(
                ok=True,
                reason=f"KMD {driver} supports {req.label} (user space {supported}){host}",
                rule=rule,
                source=kmd["source"],
            )
        return CompatResult(
            ok=False,
            reason=(KMD_OTHER_ROCM_HOST if rocm_version else KMD_OTHER_ROCM)
            % {"driver": driver, "supported": supported, "requirement": req.label, "host": rocm_version},
            rule=rule,
            source=kmd["source"],
        )
    if series in ordered and version_key(series) < version_key("6.4"):
        distance = abs(ordered.index(series) - ordered.index(_rocm_series(req.version)))
        rule = f"kmd_userspace_support rule: {kmd['rule']}"
        if distance <= 2:
            return CompatResult(
                ok=True,
                reason=f"KMD {driver} is within +/-2 releases of {req.label}{host}",
                rule=rule,
                source=kmd["source"],
            )
        return CompatResult(
            ok=False,
            reason=(KMD_TOO_FAR_HOST if rocm_version else KMD_TOO_FAR)
            % {"driver": driver, "distance": distance, "requirement": req.label, "host": rocm_version},
            rule=rule,
            source=kmd["source"],
        )
    return CompatResult(
        ok=True,
        reason=f"driver {driver} is neither a known amdgpu release nor a ROCm-like KMD version; cannot verify {req.label}{host}",
        rule="amd_rocm",
        source=kmd["source"],
        verified=False,
    )


# ------------------------------------------------------------------ Hygon DTK

_VERSION_IN_TEXT = re.compile(r"\d+\.\d+(?:\.\d+)?")


def _hydcu_version(text: str) -> str | None:
    """Kernel driver version: 'rock-5.7.1-6.2.13-V1.0.1a' -> '6.2.13' (after the ROCm base), '6.2.35' -> itself."""
    found = _VERSION_IN_TEXT.findall(text)
    if not found:
        return None
    return found[1] if text.strip().casefold().startswith("rock") and len(found) > 1 else found[0]


def _dtk(req: Requirement, driver_version: str | None, dtk_version: str | None) -> CompatResult:
    facts = compat_data()["hygon_dtk"]
    matrix_fact = facts[0]
    driver, problem = _parse_driver_text(driver_version)
    if problem:
        return problem
    host = f" (host DTK {dtk_version})" if dtk_version else ""
    node_driver = _hydcu_version(driver)
    for example in matrix_fact.get("examples", []):
        if not example.get("driver") or not example.get("dtk"):
            continue
        dtk_match = _VERSION_IN_TEXT.search(str(example["dtk"]))
        if not dtk_match or node_driver is None:
            continue
        if (
            version_key(dtk_match.group(0)) == version_key(req.version)
            and _hydcu_version(str(example["driver"])) == node_driver
        ):
            return CompatResult(
                ok=True,
                reason=(
                    f"{req.label} on driver {driver} is a known working pair "
                    f"({example['driver']} with {example['dtk']}; secondary source){host}"
                ),
                rule=f"hygon_dtk example: driver {example['driver']}, dtk {example['dtk']}",
                source=matrix_fact["source"],
            )
    return CompatResult(
        ok=True,
        reason=f"no public DTK↔driver matrix (runtime-compat.yaml); cannot verify {req.label} on driver {driver}{host}",
        rule="hygon_dtk: driver and DTK versions correspond, no public matrix",
        source=matrix_fact["source"],
        verified=False,
    )


def _parse_driver_text(text: str | None) -> tuple[str | None, CompatResult | None]:
    """Hygon drivers are package names ('rock-5.7.1-6.2.13-V1.0.1a') as often as versions."""
    if text is None or not str(text).strip():
        return None, CompatResult(ok=False, reason=DRIVER_UNKNOWN, verified=False)
    return str(text).strip(), None


# ------------------------------------------------------------------ nodes


def node_precheck(
    node,
    requirement: str,
    *,
    vendor: str | None = None,
    chip: str | None = None,
    device_model_name: str | None = None,
    allow_minor_version_compat: bool = False,
) -> CompatResult:
    """precheck() with the node's recorded driver / runtime versions.

    Pass ``vendor`` to skip the device query; otherwise the node's majority vendor among its
    non-retired devices is used (one query), and the most common model of that vendor fills in
    ``chip`` / ``device_model_name`` when they are not given.
    """
    if vendor is None:
        rows = list(
            node.devices.exclude(health="retired")
            .values_list("vendor", "device_model__name", "raw_model_name")
            .order_by()
        )
        if not rows:
            return CompatResult(
                ok=False,
                reason="no devices are recorded on this node, so its accelerator vendor is unknown",
                verified=False,
            )
        by_vendor = Counter(v for v, _, _ in rows).most_common()
        if len(by_vendor) > 1 and by_vendor[0][1] == by_vendor[1][1]:
            raise ValidationFailed(
                f"node {node} has as many {by_vendor[0][0]} as {by_vendor[1][0]} devices: say which vendor to check",
                details={"vendor": ["required"]},
            )
        vendor = by_vendor[0][0]
        labels = Counter(
            (model or raw) for v, model, raw in rows if v == vendor and (model or raw)
        ).most_common(1)
        if labels:
            chip = chip or labels[0][0]
            device_model_name = device_model_name or labels[0][0]
    return precheck(
        vendor=vendor,
        driver_version=node.driver_version or None,
        requirement=requirement,
        cann_version=node.cann_version or None,
        rocm_version=node.rocm_version or None,
        dtk_version=node.dtk_version or None,
        chip=chip,
        device_model_name=device_model_name,
        allow_minor_version_compat=allow_minor_version_compat,
    )
