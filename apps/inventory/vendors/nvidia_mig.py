"""NVIDIA ``nvidia-smi mig -lgip`` / ``-lgipp``: the GPU-instance profiles and their placements.

Formats from the NVIDIA MIG User Guide, "Getting Started with MIG" (docs.nvidia.com/datacenter/
tesla/mig-user-guide/, sections "List GPU Instance Profiles" and "Creating GPU Instances"):

-lgip: a boxed table, two lines per profile:
  |   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
  |                                                             1     0     0   |
  columns GPU, Name, ID, Instances Free/Total, Memory (GiB, two decimals), P2P, SM, DEC, ENC, then
  CE, JPEG, OFA on the second line.
-lgipp: one line per profile, "GPU  0 Profile ID  9 Placements: {0,4}:4" ("Placement :" when there
  is one); the syntax is {<start slot>,...}:<slice count>.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from .adapter import (
    fail_line,
    text_lines,
)
from .base import ParsedDevice, ParsedReport

KIND_MIG_LGIP = "nvidia-smi-mig-lgip"
KIND_MIG_LGIPP = "nvidia-smi-mig-lgipp"
VENDOR = "nvidia"

_LGIP_ROW = re.compile(
    r"\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<mem>\d+(?:\.\d+)?)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|"
)
_LGIP_ROW2 = re.compile(r"\|\s+(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|")
_LGIP_HEADER = re.compile(
    r"\|\s*(GPU instance profiles:\s*|GPU\s+Name\s+ID\b.*|Free/Total\b.*)\|", re.IGNORECASE
)
_LGIPP_ROW = re.compile(
    r"GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
    r"\{(?P<starts>\d+(?:\s*,\s*\d+)*)\}\s*:\s*(?P<size>\d+)"
)
_GIB = 1024


def parse_nvidia_mig_lgip(text: str) -> ParsedReport:
    """``nvidia-smi mig -lgip``: the GPU-instance profiles each card offers (partial report)."""
    kind = KIND_MIG_LGIP
    lines = text_lines(text, kind=kind)
    if not any("GPU instance profiles:" in line for line in lines):
        first = next((n for n, line in enumerate(lines, start=1) if line.strip()), 1)
        fail_line(
            first,
            _("no '| GPU instance profiles:' table; is this nvidia-smi mig -lgip output?"),
            kind=kind,
            text=lines[first - 1],
        )
    profiles: dict[int, list[dict[str, Any]]] = {}
    seen: dict[tuple[int, int], int] = {}
    pending: tuple[int, dict[str, Any]] | None = None  # first line of a profile, waiting for its second
    last_no = 0
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        last_no = n
        if pending is not None:
            match = _LGIP_ROW2.fullmatch(stripped)
            if match is None:
                fail_line(
                    n,
                    _("expected the second line (CE JPEG OFA) of profile %(name)s from line %(pending)s")
                    % {"name": pending[1]["name"], "pending": pending[0]},
                    kind=kind,
                    text=line,
                )
            pending[1].update({k: int(v) for k, v in match.groupdict().items()})
            pending = None
            continue
        if stripped.startswith("+") or re.fullmatch(r"\|=+\|", stripped) or _LGIP_HEADER.fullmatch(stripped):
            continue
        match = _LGIP_ROW.fullmatch(stripped)
        if match is None:
            fail_line(
                n,
                _(
                    "expected a profile line '| <gpu>  MIG <name>  <id>  <free>/<total>  <GiB>  <P2P>  <SM>  <DEC>  <ENC> |'"
                ),
                kind=kind,
                text=line,
            )
        gpu, profile_id = int(match["gpu"]), int(match["id"])
        if (gpu, profile_id) in seen:
            fail_line(
                n,
                _("GPU %(gpu)s lists profile ID %(profile_id)s twice (first on line %(line)s)")
                % {"gpu": gpu, "profile_id": profile_id, "line": seen[(gpu, profile_id)]},
                kind=kind,
                text=line,
            )
        seen[(gpu, profile_id)] = n
        entry: dict[str, Any] = {
            "id": profile_id,
            "name": match["name"],  # as printed, without the "MIG " prefix
            # nvidia-smi prints GiB with two decimals, so this is the printed value in MiB (+-5 MiB).
            "memory_mib": round(float(match["mem"]) * _GIB),
            "max_instances": int(match["total"]),
            "free_instances": int(match["free"]),
            "p2p": match["p2p"],
            "sm": int(match["sm"]),
            "dec": int(match["dec"]),
            "enc": int(match["enc"]),
            "placements": None,  # -lgip does not print them; -lgipp does
        }
        if entry["free_instances"] > entry["max_instances"]:
            fail_line(
                n,
                _("Instances %(free)s/%(total)s: more free than total")
                % {"free": match["free"], "total": match["total"]},
                kind=kind,
                text=line,
            )
        profiles.setdefault(gpu, []).append(entry)
        pending = (n, entry)
    if pending is not None:
        fail_line(
            pending[0] + 1,
            _("profile %(name)s (line %(pending)s) has no second line: the output is truncated")
            % {"name": pending[1]["name"], "pending": pending[0]},
            kind=kind,
        )
    if not profiles:
        fail_line(
            last_no or 1, _("the table lists no profile (MIG not supported or truncated output?)"), kind=kind
        )
    if not lines[last_no - 1].strip().startswith("+"):
        fail_line(last_no, _("the table is not closed by a '+---+' rule: the output is truncated"), kind=kind)
    return _mig_report(kind, profiles)


def parse_nvidia_mig_lgipp(text: str) -> ParsedReport:
    """``nvidia-smi mig -lgipp``: where each GPU-instance profile may be placed (partial report)."""
    kind = KIND_MIG_LGIPP
    lines = text_lines(text, kind=kind)
    profiles: dict[int, list[dict[str, Any]]] = {}
    seen: dict[tuple[int, int], int] = {}
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        match = _LGIPP_ROW.fullmatch(stripped)
        if match is None:
            fail_line(
                n,
                _(
                    "expected 'GPU <n> Profile ID <id> Placements: {<start>,...}:<size>' (is this nvidia-smi mig -lgipp output?)"
                ),
                kind=kind,
                text=line,
            )
        gpu, profile_id, size = int(match["gpu"]), int(match["id"]), int(match["size"])
        if (gpu, profile_id) in seen:
            fail_line(
                n,
                _("GPU %(gpu)s lists profile ID %(profile_id)s twice (first on line %(line)s)")
                % {"gpu": gpu, "profile_id": profile_id, "line": seen[(gpu, profile_id)]},
                kind=kind,
                text=line,
            )
        seen[(gpu, profile_id)] = n
        if size < 1:
            fail_line(
                n, _("placement size %(size)s is not a slice count") % {"size": size}, kind=kind, text=line
            )
        starts = [int(start) for start in match["starts"].split(",")]
        if len(set(starts)) != len(starts):
            fail_line(n, _("a start slot appears twice"), kind=kind, text=line)
        profiles.setdefault(gpu, []).append(
            {
                "id": profile_id,
                # -lgipp prints neither name, memory nor instance counts: they stay unknown here.
                "name": None,
                "memory_mib": None,
                "max_instances": None,
                "free_instances": None,
                "placements": [{"start": start, "size": size} for start in starts],
            }
        )
    return _mig_report(kind, profiles)


def _mig_report(kind: str, profiles: dict[int, list[dict[str, Any]]]) -> ParsedReport:
    report = ParsedReport(vendor=VENDOR, kind=kind, full_inventory=False)
    for gpu in sorted(profiles):
        report.devices.append(ParsedDevice(index=gpu, mig_profiles=profiles[gpu]))
    return report
