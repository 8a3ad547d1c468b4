"""Comparing nodes: the answers that must agree across a job, and the findings when they do not.
Each :class:`Aspect` reads one answer from a node's machine view as a short string, or None when the
facts do not tell (an unknown is never a difference); :func:`summarise` groups the nodes by each
answer, so that nodes that agree are one group and 1,000 nodes give a short report.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from debtorch import fingerprint, hostlist
from debtorch.findings import ERROR, INFO, Finding, Placed, finding, rank
from debtorch.fleet.nodes import DIED, MALFORMED, MISSING, SCHEMA, Node, NodeFinding
from debtorch.machine import Machine
from debtorch.units import human_bytes

# Sections of the report, in order.
SECTIONS = (("nodes", "Nodes"), ("consistency", "Consistency"), ("network", "Network"),
            ("doctor", "Node doctors"), ("probe", "Probe"))

# The variables that change how collectives behave: a difference between nodes is a finding.
DISTRIBUTED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_")
DISTRIBUTED_NAMES = ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
PER_RANK = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK")   # differ by design

# Doctor findings a fleet finding already reports node by node.
COVERED = {"fleet.E008": ("network.E001", "network.E002")}


@dataclass(frozen=True)
class Aspect:
    """One answer that must agree across nodes: ``id``'s finding (checks/findings/fleet.toml) when it does not."""

    key: str
    id: str
    title: str
    read: Callable[[Machine], Optional[str]]
    section: str = "consistency"


def _torch(m: Machine) -> Optional[str]:
    t = m.torch
    if not t.known:
        return None
    return f"{t.version} ({t.build})" if t.installed else "not installed"


def _gpu_count(m: Machine) -> Optional[str]:
    return None if not m.gpus.listed and m.gpus.present is not False else str(len(m.gpus.compute))


def _gpu_models(m: Machine) -> Optional[str]:
    if not m.gpus.listed:
        return None
    # The kinds only: how many is fleet.E007's question.
    return ", ".join(sorted({f"{g.name or 'GPU'} (cc {g.cc or '?'})" for g in m.gpus.compute})) or "none usable"


def _size(path: str) -> Callable[[Machine], Optional[str]]:
    return lambda m: human_bytes(m.get(path)) if isinstance(m.get(path), int) else None


def _ifname(m: Machine) -> Optional[str]:
    """Per IFNAME variable: whether it selects a usable interface here."""
    n = m.network
    if n.interfaces is None:
        return None
    out = []
    for c in n.choices:
        state = "usable" if c.ok else ("matches no interface" if not c.selected else "selects only down interfaces")
        out.append(f"{c.variable}={c.value}: {state}")
    return "; ".join(out) or None


def _mtu(m: Machine) -> Optional[str]:
    """The MTUs of the interfaces collective traffic uses, by link type (names differ between hardware)."""
    ifaces = [i for i in m.network.traffic_interfaces if not i.loopback]
    if not ifaces:
        return None
    by_type: dict = {}
    for i in ifaces:
        by_type.setdefault(i.link_type or "?", set()).add(i.mtu)
    return ", ".join(f"{t} {'/'.join(str(x) for x in sorted(v, key=lambda x: x or 0))}" for t, v in sorted(by_type.items()))


def _ib(m: Machine) -> Optional[str]:
    ports = m.network.ib_ports
    if not ports and m.network.interfaces is None:
        return None
    kinds: dict = {}
    for p in ports:
        label = f"{p.link_layer or '?'} {p.state or '?'} {f'{p.rate_gbps:g} Gb/s' if p.rate_gbps else 'rate ?'}"
        kinds[label] = kinds.get(label, 0) + 1
    return ", ".join(f"{n} x {label}" for label, n in sorted(kinds.items())) or "none"


def _ofed(m: Machine) -> Optional[str]:
    return m.network.ofed or ("none" if m.network.ib_ports else None)


ASPECTS = (
    Aspect("torch", "fleet.E005", "PyTorch", _torch),
    Aspect("nccl", "fleet.E006", "NCCL", lambda m: m.nccl.value),
    Aspect("gpu_count", "fleet.E007", "usable GPUs", _gpu_count),
    Aspect("ifname", "fleet.E008", "socket interface", _ifname, section="network"),
    Aspect("driver", "fleet.W001", "NVIDIA driver", lambda m: m.driver.version),
    Aspect("cudnn", "fleet.W002", "cuDNN", lambda m: m.cudnn.value),
    Aspect("cuda_runtime", "fleet.W003", "CUDA runtime", lambda m: m.get("python.torch.cuda_runtime_wheel")),
    Aspect("kernel", "fleet.W004", "kernel", lambda m: m.os.kernel),
    Aspect("python", "fleet.W005", "Python", lambda m: str(m.get("python.version") or "") or None),
    Aspect("gpu_models", "fleet.W006", "GPU models", _gpu_models),
    Aspect("shm", "fleet.W008", "/dev/shm", _size("memory.shm_total")),
    Aspect("memlock", "fleet.W009", "RLIMIT_MEMLOCK", _size("memory.memlock_soft")),
    Aspect("usable_cpus", "fleet.W010", "usable CPUs", lambda m: str(m.cpus.usable) if m.cpus.known else None),
    Aspect("mtu", "fleet.W012", "MTU", _mtu, section="network"),
    Aspect("infiniband", "fleet.W013", "InfiniBand/RoCE ports", _ib, section="network"),
    Aspect("ofed", "fleet.W014", "OFED", _ofed, section="network"),
    Aspect("debtorch", "fleet.I001", "debtorch version", lambda m: m.get("debtorch_version")),
)
ENV_ID = "fleet.W007"
TUNED_ID = "fleet.W011"


def _distributed_env(m: Machine) -> dict:
    env = m.get("env.variables") or {}
    if not isinstance(env, dict):
        return {}
    return {k: str(v) for k, v in env.items()
            if (k.startswith(DISTRIBUTED_PREFIXES) or k in DISTRIBUTED_NAMES) and k not in PER_RANK
            and not k.startswith("TORCHELASTIC_")}


def answers(m: Machine) -> dict:
    """A node's comparable answers without ``--tuned``: {aspect key: str or None, "env": {name: value}}."""
    out: dict = {a.key: a.read(m) for a in ASPECTS}
    out["env"] = _distributed_env(m) if m.section("env") else None
    return out


def tuned_answer(tuned: dict, node_fingerprint: dict) -> str:
    """``--tuned``'s answer for a node: "matches", or "differs: " and what differs."""
    diff = fingerprint.differences(tuned, node_fingerprint)
    return "matches" if not diff else "differs: " + "; ".join(diff)


def read(m: Machine, tuned: Optional[dict] = None) -> dict:
    """A node's comparable answers: {aspect key: str or None, "env": {name: value}, "tuned": ...}."""
    out = answers(m)
    if tuned is not None:
        out["tuned"] = tuned_answer(tuned, fingerprint.from_facts(m))
    return out


# ---------------------------------------------------------------- findings


@functools.lru_cache(maxsize=64)
def compressed(names: tuple[str, ...]) -> str:
    """``names`` as a Slurm host list (:func:`debtorch.hostlist.compress`), remembered: a report names
    the same groups of 10,000 nodes in its text and its JSON."""
    return hostlist.compress(names)


@dataclass(frozen=True)
class Group:
    """One value of an answer and the nodes that have it."""

    value: str
    nodes: tuple
    fix: str = ""          # a node doctor's finding: the fix those nodes' doctors gave

    def to_json(self) -> dict:
        out = {"value": self.value, "count": len(self.nodes), "nodes": compressed(tuple(self.nodes))}
        if self.fix:
            out["fix"] = self.fix
        return out


@dataclass(frozen=True)
class FleetFinding(Placed):
    """A finding about the fleet: ``finding`` as the doctor's, with the groups of nodes it names."""

    finding: Finding
    groups: tuple = ()
    section: str = "consistency"

    def to_json(self) -> dict:
        out = self.finding.to_json()
        out["section"] = self.section
        out["groups"] = [g.to_json() for g in self.groups]
        return out


def _finding(id_: str, about: str, groups: Iterable[Group], section: str, fix: Optional[str] = None,
             **values: Any) -> FleetFinding:
    return FleetFinding(finding(id_, about, fix=fix, **values), tuple(groups), section)


def _groups(pairs: Iterable[tuple]) -> list:
    """[(node name, value)] -> Groups, the largest first (ties: by value)."""
    by_value: dict = {}
    for name, value in pairs:
        by_value.setdefault(value, []).append(name)
    return [Group(v, tuple(sorted(ns))) for v, ns in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


@dataclass(frozen=True)
class Kind:
    """Nodes that answered alike (the same answers and the same doctor findings): the comparison
    works on kinds, so that 10,000 identical nodes cost one kind and a list of names."""

    values: dict
    findings: tuple[NodeFinding, ...]
    names: tuple[str, ...]          # in the order the nodes were given
    order: tuple[int, ...]          # their places in that order


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def kinds(nodes: list[Node]) -> list[Kind]:
    """The nodes' kinds, in the order of their first node.  Nodes that share their ``values`` and
    ``findings`` objects (gathered digests) are grouped without looking inside them."""
    seen: dict[tuple[int, int], tuple] = {}
    members: dict[tuple, list[int]] = {}
    first: dict[tuple, Node] = {}
    for i, n in enumerate(nodes):
        ident = (id(n.values), id(n.findings))
        key = seen.get(ident)
        if key is None:
            key = (tuple((k, _frozen(v)) for k, v in sorted(n.values.items())), n.findings)
            seen[ident] = key
        members.setdefault(key, []).append(i)
        first.setdefault(key, n)
    return [Kind(first[key].values, first[key].findings, tuple(nodes[i].name for i in order), tuple(order))
            for key, order in members.items()]


def _kind_groups(pairs: Iterable[tuple[Kind, Any]]) -> list[Group]:
    """[(kind, value)] -> Groups of node names, the largest first (ties: by value)."""
    by_value: dict = {}
    for kind, value in pairs:
        by_value.setdefault(value, []).extend(kind.names)
    return [Group(v, tuple(sorted(ns))) for v, ns in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def _difference(a: Aspect, found: list[Kind]) -> Optional[FleetFinding]:
    pairs = [(k, k.values.get(a.key)) for k in found if k.values.get(a.key) is not None]
    if len({v for _, v in pairs}) < 2:
        return None
    groups = _kind_groups(pairs)
    return _finding(a.id, a.title, groups, a.section, what=a.title, values=len(groups),
                    nodes=sum(len(k.names) for k, _ in pairs))


def _env_differences(found: list[Kind]) -> list[FleetFinding]:
    known = [k for k in found if k.values.get("env") is not None]
    names = sorted({var for k in known for var in k.values["env"]})
    count = sum(len(k.names) for k in known)
    out = []
    for var in names:
        if len({k.values["env"].get(var, "(unset)") for k in known}) > 1:
            groups = _kind_groups((k, k.values["env"].get(var, "(unset)")) for k in known)
            out.append(_finding(ENV_ID, var, groups, "consistency", what=var, values=len(groups), nodes=count))
    return out


def _tuned(found: list[Kind], path: str) -> list[FleetFinding]:
    pairs = [(k, k.values.get("tuned")) for k in found if k.values.get("tuned") is not None]
    bad = sum(len(k.names) for k, v in pairs if v != "matches")
    if not bad:
        return []
    return [_finding(TUNED_ID, path, _kind_groups(pairs), "consistency", path=path, count=bad,
                     nodes=sum(len(k.names) for k, _ in pairs))]


def _status(nodes: list, timeout: Optional[float]) -> list:
    specs = ((MISSING, "fleet.E001", "did not join within the timeout"),
             (DIED, "fleet.E002", "joined but sent no document"),
             (MALFORMED, "fleet.E003", "sent a document that cannot be read"),
             (SCHEMA, "fleet.E004", "sent facts of another schema version"))
    out = []
    for status, id_, what in specs:
        bad = [n for n in nodes if n.status == status]
        if bad:
            detail = "" if status != MISSING or timeout is None else f" ({timeout:g} s)"
            out.append(_finding(id_, "nodes", _groups((n.name, n.detail or what) for n in bad), "nodes",
                                count=len(bad), nodes=len(nodes), what=what, timeout=detail))
    return out


def _message_and_fix(g: Group) -> Group:
    """A group of a node doctor's finding, by (message, fix), as a Group of the message with its fix."""
    pair: Any = g.value
    return Group(pair[0], g.nodes, pair[1])


def _doctor_fix(fixes: dict[str, int]) -> Optional[str]:
    """What a node doctor's finding says to do, as the fleet shows it: the fix its nodes' doctors
    gave ({fix: nodes}; the one most of them gave when they differ, with a note); None when none
    gave one."""
    given = sorted(((-n, fix) for fix, n in fixes.items() if fix))
    if not given:
        return None
    if len(given) == 1:
        return given[0][1]
    return f"{given[0][1]}\n(on {_plural_nodes(-sum(n for n, _ in given[1:]))} the doctor gives another fix: --json lists each)"


def _plural_nodes(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def _doctors(found: list[Kind], nodes: int, fired: set) -> list[FleetFinding]:
    """One finding per doctor id at warning or error level, with the nodes that have it, and the
    fix the nodes' own doctors gave."""
    covered = {i for fid, ids in COVERED.items() if fid in fired for i in ids}
    by_id: dict = {}
    for k in found:
        for f in k.findings:
            if f.level == INFO or f.id in covered:
                continue
            entry = by_id.setdefault(f.id, {"level": f.level, "pairs": [], "kinds": {}, "fixes": {}})
            entry["pairs"].append((k, (f.message, f.fix)))
            if id(k) not in entry["kinds"]:
                entry["kinds"][id(k)] = len(k.names)
            entry["fixes"][f.fix] = entry["fixes"].get(f.fix, 0) + len(k.names)
    out = []
    for fid, entry in sorted(by_id.items(), key=lambda kv: (-rank(kv[1]["level"]), kv[0])):
        level = entry["level"]
        # A group per message and fix: the JSON says which nodes' doctors gave which fix.
        groups = [_message_and_fix(g) for g in _kind_groups(entry["pairs"])]
        out.append(_finding("fleet.E009" if level == ERROR else "fleet.W015", fid, groups, "doctor",
                            fix=_doctor_fix(entry["fixes"]), doctor_id=fid, count=sum(entry["kinds"].values()),
                            nodes=nodes))
    return out


@dataclass
class Summary:
    """What the fleet comparison found."""

    expected: int
    nodes: list                                       # every Node (not only those compared)
    findings: list = field(default_factory=list)      # FleetFinding, report order
    identical: list = field(default_factory=list)     # [(names, differing aspect titles)], largest first
    skipped: list = field(default_factory=list)       # offline: files that are no node's document (Skipped)

    @property
    def compared(self) -> list:
        return [n for n in self.nodes if n.ok]

    def count(self, level: str) -> int:
        return sum(1 for f in self.findings if f.level == level)

    def exit_code(self, fail_on: str = ERROR) -> int:
        """0 when no finding reaches ``fail_on``, else 1 (the doctor's rule)."""
        return 1 if any(rank(f.level) >= rank(fail_on) for f in self.findings) else 0


def _identity(found: list[Kind]) -> list:
    """Nodes grouped by everything compared: [(names, titles where the group differs from the largest)]."""
    keys = [a.key for a in ASPECTS] + ["tuned"]

    def signature(k: Kind) -> tuple:
        env = k.values.get("env") or {}
        return (tuple(k.values.get(key) for key in keys), tuple(sorted(env.items())),
                tuple(sorted({(f.id, f.level) for f in k.findings if f.level != INFO})))

    by_sig: dict = {}
    for k in found:
        by_sig.setdefault(signature(k), []).append(k)
    groups = []
    for same in by_sig.values():
        members = sorted((i, name) for k in same for i, name in zip(k.order, k.names))
        groups.append(([name for _, name in members], same[0]))
    groups.sort(key=lambda g: (-len(g[0]), g[0][0]))
    if not groups:
        return []
    ref = groups[0][1]
    titles = {a.key: a.title for a in ASPECTS}
    out = []
    for names, k in groups:
        what = [titles.get(key, key) for key in keys if k.values.get(key) != ref.values.get(key)]
        env, ref_env = k.values.get("env") or {}, ref.values.get("env") or {}
        what += sorted(var for var in set(env) | set(ref_env) if env.get(var) != ref_env.get(var))
        if signature(k)[2] != signature(ref)[2]:
            what.append("doctor findings")
        out.append((names, what))
    return out


def summarise(nodes: list, expected: Optional[int] = None, timeout: Optional[float] = None,
              tuned_path: Optional[str] = None, extra: Iterable[FleetFinding] = ()) -> Summary:
    """Every fleet finding about ``nodes`` (:class:`~debtorch.fleet.nodes.Node`), in report order.
    The work is linear in the nodes: they are compared as kinds (:func:`kinds`)."""
    ok = [n for n in nodes if n.ok]
    found_kinds = kinds(ok)
    found = _status(nodes, timeout)
    for a in ASPECTS:
        if f := _difference(a, found_kinds):
            found.append(f)
    found += _env_differences(found_kinds)
    if tuned_path:
        found += _tuned(found_kinds, tuned_path)
    found += _doctors(found_kinds, len(ok), {f.id for f in found})
    found += list(extra)
    order = {s: i for i, (s, _) in enumerate(SECTIONS)}
    found.sort(key=lambda f: (order.get(f.section, 99), -rank(f.level), f.id, f.finding.about))
    return Summary(expected=expected if expected is not None else len(nodes), nodes=list(nodes), findings=found,
                   identical=_identity(found_kinds))
