"""Capacity index: nodes grouped into classes so a decision costs O(classes), not O(nodes).

Two nodes are *statically equivalent* when every attribute a static filter, a policy or tier 3 reads
is the same: status, pool (and so the overcommit factor), ownership, taints, labels, cluster, zone, CPU
and memory size, and per card its position, type, memory, features, health, ownership, gray flag, MIG
geometry and the *shape* of its topology (which cards share a clique / PCIe switch / NUMA node, and in
which order their names sort — tier 3 sorts by them). They are *in the same state* when, on top of
that, their free capacity is identical: CPU and memory used, and per card the memory, hard and shared
compute used, whether it is held whole, whether it holds slices, and its MIG instances.

Nodes with the same signature (static class, state) pass the same filters, get the same score and the
same device choice from every node-local policy, so the engine evaluates one signature once and keeps,
per signature, the sorted positions of its nodes (exact ties still go to the first node in snapshot
order, as a per-node scan would). A fleet of 10,000 nodes built from a handful of node types has a few
hundred signatures at most while it fills up.

The index is rebuilt when the snapshot's static version changes and otherwise follows the snapshot's
change log (nodes touched by ``Snapshot.apply`` / ``release``), so it is updated incrementally. A
signature id means one (class, state) for the index's whole life: the engine's per-request indexes
keep scores and device choices per signature id. So an index that fell behind a trimmed change log
re-reads every node's state under the same ids (it is never rebuilt with new ones: an engine index
that outlived such a rebuild read another state's device choice for the id, and proposed a card a
whole-card request held, issue 27 §5). Any new
per-card state that changes what fits or how a node scores must be added to :func:`state_key` (MIG
layouts are: ``DeviceState.mig_used``, see ``engine/mig.py``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

from .fleet import Snapshot
from .nodes import NodeState

INDEX_KEY = "classes"


def _ranks(values: list) -> list:
    """Each value's rank among the node's distinct values, keeping ``""`` / ``None`` apart."""
    distinct = sorted({v for v in values if v not in ("", None)}, key=str)
    rank = {v: i for i, v in enumerate(distinct)}
    return [None if v in ("", None) else rank[v] for v in values]


def static_key(snapshot: Snapshot, node: NodeState) -> tuple:
    devs = node.devices
    groups = _ranks([d.topology_group for d in devs])
    switches = _ranks([d.pcie_switch for d in devs])
    cards = tuple(
        (
            d.index,
            d.kind,
            d.vendor,
            d.model,
            d.memory_mib,
            d.features,
            d.healthy,
            d.schedulable,
            d.gray,
            d.owner_project,
            d.numa_node,
            groups[i],
            switches[i],
            None if getattr(d, "mig", None) is None else getattr(d.mig, "key", id(d.mig)),
        )
        for i, d in enumerate(devs)
    )
    return (
        node.status,
        node.pool,
        node.factor,
        node.owner_project,
        node.taints,
        tuple(sorted(node.labels.items())),
        getattr(node, "cluster", ""),
        node.zone,
        node.cpu_milli,
        node.memory_mib,
        cards,
    )


def state_key(node: NodeState) -> tuple:
    return (
        node.cpu_used,
        node.mem_used,
        tuple(
            (
                d.mem_used,
                d.hard_used,
                d.shared_used,
                d.whole_by is not None,
                # a MIG card also needs the count (soft slices beside its instances, engine/mig.py)
                len(d.slices) if getattr(d, "mig", None) is not None else bool(d.slices),
                tuple(sorted(d.mig_used.values())) if getattr(d, "mig_used", None) else (),
            )
            for d in node.devices
        ),
    )


class NodeClasses:
    """Static classes and state signatures of one snapshot (one static version).

    Signatures are interned as integers (``sig_ids``); ``members`` maps a signature id to the sorted
    positions of its nodes and ``class_sigs`` a static class to its signature ids that have nodes. Per
    static class, ``logs`` lists the signature ids that gained a node, in order, so an index for one
    request reads only the changes of the classes that pass its static filter.
    """

    __slots__ = (
        "uid",
        "static_version",
        "seq",
        "class_of",
        "reps",
        "sizes",
        "sig_ids",
        "sig_class",
        "sig_of",
        "members",
        "class_sigs",
        "logs",
        "log_offsets",
    )

    def __init__(self, snapshot: Snapshot) -> None:
        self.uid = snapshot.uid
        self.static_version = snapshot.static_version
        self.seq = snapshot.change_seq
        ids: dict[tuple, int] = {}
        self.class_of: list[int] = []
        self.reps: list[NodeState] = []  # class id -> its first node
        self.sizes: list[int] = []
        self.sig_ids: dict[tuple, int] = {}
        self.sig_class: list[int] = []  # signature id -> static class id
        self.sig_of: list[int] = []  # node position -> signature id
        self.members: dict[int, list[int]] = {}  # signature id -> sorted node positions
        self.class_sigs: list[set[int]] = []
        self.logs: list[list[int]] = []
        self.log_offsets: list[int] = []
        for node in snapshot.nodes:
            key = static_key(snapshot, node)
            cid = ids.get(key)
            if cid is None:
                cid = ids[key] = len(self.reps)
                self.reps.append(node)
                self.sizes.append(0)
                self.class_sigs.append(set())
                self.logs.append([])
                self.log_offsets.append(0)
            self.sizes[cid] += 1
            self.class_of.append(cid)
            sid = self._sig(cid, node)
            self.sig_of.append(sid)
            members = self.members.get(sid)
            if members is None:
                self.members[sid] = [node.pos]
                self.class_sigs[cid].add(sid)
            else:
                members.append(node.pos)  # positions arrive in order

    def _sig(self, cid: int, node: NodeState) -> int:
        key = (cid, state_key(node))
        sid = self.sig_ids.get(key)
        if sid is None:
            sid = self.sig_ids[key] = len(self.sig_class)
            self.sig_class.append(cid)
        return sid

    @classmethod
    def of(cls, snapshot: Snapshot) -> NodeClasses:
        """The snapshot's index, brought up to date with its change log (rebuilt when stale)."""
        idx = snapshot.indexes.get(INDEX_KEY)
        if idx is None or idx.uid != snapshot.uid or idx.static_version != snapshot.static_version:
            idx = snapshot.indexes[INDEX_KEY] = cls(snapshot)
            return idx
        if idx.seq != snapshot.change_seq:
            idx.sync(snapshot)
        return idx

    def log_end(self, cid: int) -> int:
        return self.log_offsets[cid] + len(self.logs[cid])

    def sync(self, snapshot: Snapshot) -> None:
        """Follow the change log; when it was trimmed past us, re-read every node (ids are kept)."""
        start = self.seq - snapshot.log_offset
        nodes = snapshot.nodes
        members = self.members
        log = snapshot.change_log
        if start < 0:
            changed: Iterable[int] = range(len(nodes))
        else:
            changed = dict.fromkeys(log[start:]) if len(log) - start > 1 else log[start:]
        keep = max(2, snapshot.log_limit // 2)  # per-class logs: as long as half the snapshot's
        for pos in changed:
            cid = self.class_of[pos]
            sid = self._sig(cid, nodes[pos])
            old = self.sig_of[pos]
            if sid == old:
                continue
            lst = members[old]
            if len(lst) == 1:
                del members[old]
                self.class_sigs[cid].discard(old)
            else:
                del lst[bisect_left(lst, pos)]
            target = members.get(sid)
            if target is None:
                members[sid] = [pos]
                self.class_sigs[cid].add(sid)
            else:
                insort(target, pos)
            self.sig_of[pos] = sid
            clog = self.logs[cid]
            clog.append(sid)
            if len(clog) > keep:  # indexes that fall behind re-read ``class_sigs``
                drop = len(clog) - keep // 2
                del clog[:drop]
                self.log_offsets[cid] += drop
        self.seq = snapshot.change_seq
