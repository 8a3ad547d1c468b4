"""The bad-node finder (``debtorch fleet --probe``; docs/fleet.md, "The bad-node finder"): the plan
every rank runs (:func:`plan`: ``--budget`` split between a compute check on every rank and rounds
of pairwise all-reduces) and the verdict (:func:`judge`: every node against the median of all;
the nodes named make the list for ``srun --exclude``).  Pure functions; the measuring is in
:mod:`debtorch.fleet.torchside`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from debtorch import hostlist, inputs
from debtorch.findings import finding
from debtorch.fleet.compare import FleetFinding, Group

SLOW = 0.75              # a node below 75 % of the median is slow
# A pair is one measurement, a node's score several: with every node healthy, single pairs went
# down to 0.57 of the median on our busy 2-core machine (docs/fleet.md), so a pair must fall lower.
SLOW_PAIR = 0.5
MIN_ROUND_S = 1.0        # a pair gets at least this long
MAX_ROUNDS = 6           # partners per node: enough for a median that one bad link cannot move
MIN_BUDGET_S = 5.0
CPU = {"backend": "gloo", "size_bytes": 4 * 1024 * 1024, "matrix_n": 256}
GPU = {"backend": "nccl", "size_bytes": 64 * 1024 * 1024, "matrix_n": 4096}


Round = List[List[int]]   # the pairs of ranks that all-reduce together at once


def rounds(world: int, limit: Optional[int] = None) -> List[Round]:
    """Round-robin pairings (the circle method): ``world - 1`` rounds (``world`` when odd), in
    each every rank has at most one partner, and every pair meets exactly once over all rounds."""
    if world < 2:
        return []
    ids: List[Optional[int]] = list(range(world))
    if world % 2:
        ids.append(None)  # an odd world: the rank paired with None sits the round out
    n = len(ids)
    out: List[Round] = []
    for _ in range(n - 1):
        pairs = [(ids[i], ids[n - 1 - i]) for i in range(n // 2)]
        out.append([sorted((a, b)) for a, b in pairs if a is not None and b is not None])
        ids = [ids[0], ids[-1]] + ids[1:-1]
        if limit is not None and len(out) >= limit:
            break
    return out


def plan(world: int, budget_s: float, gpu: bool) -> dict:
    """What every rank runs within ``budget_s`` seconds (start-up, compute, pair rounds, margin)."""
    kind = GPU if gpu else CPU
    usable = max(0.0, budget_s - 2.0) * 0.8          # process group start-up and a margin
    compute_s = min(10.0, max(0.5, usable * 0.2))
    pair_time = max(0.0, usable - compute_s)
    count = 0
    if world > 1:
        every_pair = world - 1 if world % 2 == 0 else world   # rounds until every pair has met
        count = max(1, min(every_pair, int(pair_time // MIN_ROUND_S), MAX_ROUNDS))
    sched = rounds(world, count)
    round_s = round(pair_time / len(sched), 3) if sched else 0.0
    return {"probe": True, **kind, "compute_s": round(compute_s, 3), "round_s": round_s, "rounds": sched,
            "timeout_s": budget_s, "budget_s": budget_s}


@dataclass
class NodeScore:
    rank: int
    name: str
    gflops: Optional[float] = None
    busbw: Optional[float] = None          # median over its pairs, GB/s
    partners: int = 0
    error: Optional[str] = None
    verdict: str = "ok"                    # ok, slow compute, slow all-reduce, failed

    def to_json(self) -> dict:
        return {"rank": self.rank, "node": self.name, "gflops": self.gflops, "busbw_gbs": self.busbw,
                "partners": self.partners, "error": self.error, "verdict": self.verdict}


@dataclass
class Verdict:
    scores: List[NodeScore]
    pairs: List[Tuple[int, int, float]]     # [(a, b, busbw GB/s)]
    median_gflops: Optional[float]
    median_busbw: Optional[float]
    findings: List[FleetFinding] = field(default_factory=list)
    exclude: List[str] = field(default_factory=list)   # node names

    def to_json(self) -> dict:
        return {"median_gflops": self.median_gflops, "median_busbw_gbs": self.median_busbw,
                "nodes": [s.to_json() for s in self.scores],
                "pairs": [{"ranks": [a, b], "busbw_gbs": bw} for a, b, bw in self.pairs],
                "exclude": hostlist.compress(self.exclude)}


def _rate(x: object) -> bool:
    """A rate as a rank sent it: a finite number, not below 0."""
    return isinstance(x, (int, float)) and inputs.finite(x) and x >= 0


def _median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


Pair = Tuple[int, int]   # two ranks, the lower first


def _read_result(s: NodeScore, res: Dict[str, Any], world: int, pair_bw: Dict[Pair, float]) -> None:
    """What a rank sent, every number checked (a hostile one may send anything): its compute rate
    into ``s``, its pairs' bus bandwidths into ``pair_bw``."""
    comp = res.get("compute")
    if isinstance(comp, dict) and _rate(comp.get("gflops")):
        s.gflops = comp["gflops"]
    pairs = res.get("pairs")
    if not isinstance(pairs, list):
        return
    for p in pairs:
        if isinstance(p, dict) and _rate(p.get("busbw_gbs")) and p.get("partner") in range(world):
            a, b = sorted((s.rank, p["partner"]))
            # Both sides time the same all-reduces; keep the slower view.
            pair_bw[a, b] = min(pair_bw.get((a, b), float("inf")), float(p["busbw_gbs"]))


def judge(results: Dict[int, Any], names: Dict[int, str], world: int, budget_s: float) -> Verdict:
    """``results``: rank -> what :func:`debtorch.fleet.torchside.run_probe` returned (absent: no answer)."""
    scores = []
    pair_bw: Dict[Pair, float] = {}
    for r in range(world):
        res = results.get(r)
        s = NodeScore(rank=r, name=names.get(r, f"rank {r}"))
        if res is None:
            s.error, s.verdict = f"no result within the budget ({budget_s:g} s)", "failed"
        elif not isinstance(res, dict):
            s.error, s.verdict = "unreadable result", "failed"
        elif res.get("error"):
            s.error, s.verdict = str(res.get("error"))[:200], "failed"
        else:
            _read_result(s, res, world, pair_bw)
        scores.append(s)
    med_g = _median([s.gflops for s in scores if s.gflops is not None])
    med_bw = _median(list(pair_bw.values()))
    by_rank = {s.rank: s for s in scores}
    for s in scores:
        mine = [bw for (a, b), bw in pair_bw.items() if s.rank in (a, b)]
        s.partners = len(mine)
        s.busbw = _median(mine)
        if s.verdict == "failed":
            continue
        if med_g and s.gflops is not None and s.gflops < SLOW * med_g:
            s.verdict = "slow compute"
        elif med_bw and s.partners >= 2 and max(mine) < SLOW * med_bw:
            # Slow with every partner: a node whose link is bad is slow with all of them, a healthy
            # node with at least one (a slow pair of healthy nodes is fleet.W018's).
            s.verdict = "slow all-reduce"
    v = Verdict(scores=scores, pairs=sorted((a, b, bw) for (a, b), bw in pair_bw.items()),
                median_gflops=med_g, median_busbw=med_bw)
    _findings(v, by_rank)
    return v


def _pct(x: Optional[float], med: Optional[float]) -> str:
    return f"{100 * x / med:.0f}%" if x is not None and med else "?"


def _failure(v: Verdict, s: NodeScore) -> str:
    return s.error or "failed"


def _slow_compute(v: Verdict, s: NodeScore) -> str:
    return f"{s.gflops:.1f} GFLOP/s ({_pct(s.gflops, v.median_gflops)} of the median {v.median_gflops:.1f})"


def _slow_allreduce(v: Verdict, s: NodeScore) -> str:
    return (f"{s.busbw:.2f} GB/s bus bandwidth ({_pct(s.busbw, v.median_busbw)} of the median "
            f"{v.median_busbw:.2f}), slow with all {s.partners} partners")


# A node's verdict, its finding, and what the finding says of each node.
_NAMED = (("failed", "fleet.E010", _failure), ("slow compute", "fleet.W016", _slow_compute),
          ("slow all-reduce", "fleet.W017", _slow_allreduce))


def _findings(v: Verdict, by_rank: Dict[int, NodeScore]) -> None:
    n = len(v.scores)
    named = []
    for verdict, fid, says in _NAMED:
        these = [s for s in v.scores if s.verdict == verdict]
        if these:
            found = finding(fid, "probe", count=len(these), nodes=n, bar=f"{SLOW:.0%}")  # (E010 has no bar)
            v.findings.append(FleetFinding(found, tuple(Group(says(v, s), (s.name,)) for s in these), "probe"))
        named += these
    ranks = {s.rank for s in named}
    slow_pairs = [(a, b, bw) for a, b, bw in v.pairs
                  if v.median_busbw and bw < SLOW_PAIR * v.median_busbw and a not in ranks and b not in ranks]
    if slow_pairs:
        v.findings.append(FleetFinding(
            finding("fleet.W018", "probe", count=len(slow_pairs),
                    plural="s" if len(slow_pairs) != 1 else "", bar=f"{SLOW_PAIR:.0%}"),
            tuple(Group(f"{bw:.2f} GB/s ({_pct(bw, v.median_busbw)} of the median)",
                        (by_rank[a].name, by_rank[b].name)) for a, b, bw in slow_pairs), "probe"))
    v.exclude = sorted({s.name for s in named})


def lines(v: Verdict, limit: int = 12) -> List[str]:
    """The probe's table: the worst nodes first."""
    order = {"failed": 0, "slow compute": 1, "slow all-reduce": 2, "ok": 3}
    rows = sorted(v.scores, key=lambda s: (order.get(s.verdict, 9), s.gflops or 0))
    med_g = f"{v.median_gflops:.1f}" if v.median_gflops else "?"
    med_b = f"{v.median_busbw:.2f}" if v.median_busbw else "?"
    out = [f"median: compute {med_g} GFLOP/s, all-reduce bus bandwidth {med_b} GB/s ({len(v.pairs)} pairs)"]
    for s in rows[:limit]:
        comp = f"{s.gflops:.1f} ({_pct(s.gflops, v.median_gflops)})" if s.gflops is not None else "-"
        bw = f"{s.busbw:.2f} ({_pct(s.busbw, v.median_busbw)})" if s.busbw is not None else "-"
        out.append(f"{s.name:<24} compute {comp:<16} busbw {bw:<16} {s.verdict}")
    if len(rows) > limit:
        out.append(f"... {len(rows) - limit} more nodes (--json lists them)")
    if v.exclude:
        out.append(f"exclude: srun --exclude={hostlist.compress(v.exclude)} ...")
    return out
