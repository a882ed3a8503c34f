"""Real DRA driver ResourceSlices, consumable capacity and partitionable-device counters."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from pathlib import Path

import yaml

from tests.kube.fake_apiserver.quantity import parse_quantity

# -- real ResourceSlices of the DRA drivers (fixtures/dra, sources in fixtures/dra/SOURCES.md) --------
DRA_SAMPLES = Path(__file__).parent.parent / "fixtures" / "dra"


def dra_sample(name: str) -> dict:
    """A driver's ResourceSlice from ``fixtures/dra/<name>.yaml``, as resource.k8s.io/v1: a v1beta1
    sample's ``devices[].basic`` (the v1beta1 BasicDevice wrapper) is unwrapped onto the device, the
    one difference between the two versions for a slice of plain devices."""
    obj = yaml.safe_load((DRA_SAMPLES / f"{name}.yaml").read_text())
    if obj.get("apiVersion") == "resource.k8s.io/v1beta1":
        obj["apiVersion"] = "resource.k8s.io/v1"
        devices = obj["spec"]["devices"]
        obj["spec"]["devices"] = [{"name": d["name"], **(d.get("basic") or {})} for d in devices]
    return obj


# -- consumable capacity (KEP-5075 DRAConsumableCapacity, resource.k8s.io/v1) ---------------------
# The API reference: a DeviceRequest's ``exactly.capacity.requests`` names how much of each device
# capacity the request needs; a device with ``allowMultipleAllocations: true`` may be allocated to
# several requests at once, each consuming its share, never more than ``capacity[].value`` in all;
# ``capacity[].requestPolicy`` gives ``default`` (consumed when the request names none; without a
# policy the full value) and ``validRange {min, max, step}`` / ``validValues`` (a request is rounded up
# to the next valid amount, and one above every valid amount does not fit the device). A device
# without allowMultipleAllocations is exclusive and only needs capacity ≥ the request.


def _consumed_capacity(device: dict, wanted: dict) -> dict[str, Decimal]:
    """What one allocation of a shared device consumes of each capacity; ValueError when a request
    is above the policy's max (or every valid value)."""
    use = {}
    for cap, spec in (device.get("capacity") or {}).items():
        value = parse_quantity(spec["value"])[0]
        policy = spec.get("requestPolicy")
        if cap not in wanted:
            use[cap] = parse_quantity(policy["default"])[0] if policy and policy.get("default") else value
            continue
        q = parse_quantity(wanted[cap])[0]
        if policy and policy.get("validValues"):
            valid = sorted(parse_quantity(v)[0] for v in policy["validValues"])
            q = next((v for v in valid if v >= q), None)
            if q is None:
                raise ValueError(cap)
        elif policy and policy.get("validRange"):
            rng = policy["validRange"]
            lo = parse_quantity(rng.get("min", "0"))[0]
            q = max(q, lo)
            if rng.get("step"):
                step = parse_quantity(rng["step"])[0]
                q = lo + ((q - lo) / step).to_integral_value(rounding=ROUND_CEILING) * step
            if rng.get("max") is not None and q > parse_quantity(rng["max"])[0]:
                raise ValueError(cap)
        use[cap] = q
    return use


def _consumable_fits(device: dict, wanted: dict, already: dict[str, Decimal]) -> bool:
    """Whether ``device`` can serve a request for ``wanted`` capacity, given what other allocations
    already consume of it."""
    caps = device.get("capacity") or {}
    if any(cap not in caps for cap in wanted):
        return False
    if not device.get("allowMultipleAllocations"):
        return all(parse_quantity(wanted[c])[0] <= parse_quantity(caps[c]["value"])[0] for c in wanted)
    try:
        use = _consumed_capacity(device, wanted)
    except ValueError:
        return False
    return all(already.get(c, Decimal(0)) + q <= parse_quantity(caps[c]["value"])[0] for c, q in use.items())


def _quantity_text(q: Decimal, like: str) -> str:
    """``q`` spelled as a Quantity in its canonical form: binary (the largest of Ei … Ki that
    divides it) where the capacity's value is binary, else a plain number."""
    if parse_quantity(like)[1] == "binary" and q and q == q.to_integral_value():
        for shift, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
            if int(q) % (1 << shift) == 0:
                return f"{int(q) >> shift}{suffix}"
    return str(int(q)) if q == q.to_integral_value() else str(q)


# -- partitionable devices (KEP-4815 DRAPartitionableDevices, resource.k8s.io/v1) -------------------
# The API reference: ``ResourceSliceSpec.sharedCounters`` is a list of CounterSets {name, counters:
# name -> {value: quantity}} ("Only one of Devices and SharedCounters can be set in a ResourceSlice";
# at most 8 sets); ``Device.consumesCounters`` lists {counterSet, counters} a device uses while it is
# allocated. The counter sets are the pool's (a device names a set of its driver's pool, published in
# another slice of that pool). A device can be allocated only while every counter it consumes has at
# least that much left after the other allocated devices' consumption.


def _counter_consumption(device: dict) -> dict[tuple[str, str], Decimal]:
    """(counter set, counter) -> amount the device consumes while allocated."""
    use: dict[tuple[str, str], Decimal] = {}
    for c in device.get("consumesCounters") or []:
        for name, counter in ((c or {}).get("counters") or {}).items():
            key = (str(c.get("counterSet") or ""), name)
            use[key] = use.get(key, Decimal(0)) + parse_quantity((counter or {}).get("value", "0"))[0]
    return use


def _first_fitting(free: list, count: int, counters: dict, used: dict) -> list | None:
    """The first ``count`` of ``free`` (driver, pool, device) whose counters fit together, or None."""
    chosen: list = []
    trial = {pool: dict(u) for pool, u in used.items()}
    for d, p, dev in free:
        if len(chosen) == count:
            break
        if not _counters_fit(dev, counters.get((d, p)), trial.get((d, p), {})):
            continue
        chosen.append((d, p, dev))
        mine = trial.setdefault((d, p), {})
        for ck, q in _counter_consumption(dev).items():
            mine[ck] = mine.get(ck, Decimal(0)) + q
    return chosen if len(chosen) == count else None


def _counters_fit(device: dict, available: dict | None, used: dict) -> bool:
    """True when the device consumes no counters, or every counter it consumes has enough left of its
    pool's ``available`` (counter set, counter) -> value after ``used``. A set or counter the pool does
    not publish is never enough (the device cannot be allocated)."""
    need = _counter_consumption(device)
    if not need:
        return True
    available = available or {}
    return all(
        key in available and used.get(key, Decimal(0)) + q <= available[key] for key, q in need.items()
    )
