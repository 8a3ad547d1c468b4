"""The search for the fastest settings: what ``debtorch tune --measure`` does with its budget.
Torch-free: it only calls a trial function, so tests run it on synthetic, noisy response surfaces.

The strategy, step by step, is docs/tune.md's "Measurement": each decision a race
(:meth:`Search.race`, "beyond noise" is :meth:`Search.better`), interactions re-raced, a small
space measured whole, close calls settled, no trial started that the budget cannot pay.  How it
was chosen, on replays and synthetic surfaces: benchmarks/results/tune.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Optional

from debtorch import stats
from debtorch.train.device import CPU, Device
from debtorch.train.settings import SETTINGS, Searched, Setting, Settings


@dataclass(frozen=True)
class Outcome:
    """What one trial returns."""

    samples_per_s: Optional[float]       # None when the trial failed
    seconds: float                       # wall time the trial cost (warm-up and start-up included)
    data_wait: Optional[float] = None    # share of step time spent waiting for data
    error: Optional[str] = None


@dataclass(frozen=True)
class Trial:
    """One measurement in the search's log."""

    index: int
    phase: str                 # the dimension being raced, or "start"
    settings: Settings
    samples_per_s: Optional[float]
    seconds: float
    data_wait: Optional[float] = None
    error: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "phase": self.phase, "settings": self.settings.to_dict(),
                "label": self.settings.short(), "samples_per_s": self.samples_per_s, "seconds": self.seconds,
                "data_wait_share": self.data_wait, "error": self.error}


TrialFn = Callable[[Settings], Outcome]


def _apply_workers(s: Settings, v: int) -> Settings:
    """Set the worker count and what goes with it (prefetch, persistence, start method)."""
    if v == 0:
        return s.replace(num_workers=0, prefetch_factor=None, persistent_workers=False, start_method=None)
    return s.replace(num_workers=v, prefetch_factor=s.prefetch_factor or 2, persistent_workers=True,
                     start_method=s.start_method or "fork")


def _fmt(v: Any) -> str:
    """A value in a reason: a switch on or off, anything else as it is."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


@dataclass
class Dimension:
    """One thing to choose: a settings field (or several: a joint dimension), its candidate
    values, and its measured-reason id."""

    name: str
    values: list[Any]
    rule: str
    apply: Optional[Callable[[Settings, Any], Settings]] = None
    needs: Optional[Callable[[Settings], bool]] = None   # when the dimension means anything
    read: Optional[Callable[[Settings], Any]] = None     # the value in a Settings (default: the field)
    fields: tuple[str, ...] = ()                         # the settings fields it decides (default: its name)
    first: Optional[list[Any]] = None                    # the values of the first race (default: all)
    # coarse-to-fine: more values near the winner, given those tried
    refine: Optional[Callable[[set[Any], Any], list[Any]]] = None
    show: Optional[Callable[[Any], str]] = None          # a value in words (default: name=value)
    unit: str = ""                                       # "splits of 2 CPUs": the reason counts what was raced

    def with_value(self, s: Settings, v: Any) -> Settings:
        """``s`` with this dimension at ``v``."""
        return self.apply(s, v) if self.apply else s.replace(**{self.name: v})

    def get(self, s: Settings) -> Any:
        return self.read(s) if self.read else getattr(s, self.name)

    def active(self, s: Settings) -> bool:
        return self.needs(s) if self.needs else True

    def label(self, v: Any) -> str:
        return self.show(v) if self.show else f"{self.name}={_fmt(v)}"

    def decides(self) -> tuple[str, ...]:
        return self.fields or (self.name,)

    def first_values(self) -> list[Any]:
        return list(self.first if self.first is not None else self.values)

    def more(self, tried: set[Any], winner: Any) -> list[Any]:
        """Values to race next to ``winner`` (coarse-to-fine, the split); none for the others."""
        return [v for v in self.refine(tried, winner) if v not in tried] if self.refine is not None else []


def coarse(values: list) -> list:
    """0, 1, 2, 4, 8 ... and the last value: the split's lattice on a wide axis, and its steps outward."""
    if len(values) <= 5:
        return list(values)
    keep = {values[0], values[-1]}
    v = 1
    while v <= values[-1]:
        if v in values:
            keep.add(v)
        v *= 2
    return sorted(keep)


def bisect(values: list, tried: set, v: Any) -> list:
    """The midpoints between ``v`` and its nearest tried neighbours that are among ``values``."""
    lo = max((x for x in tried if x < v), default=v)
    hi = min((x for x in tried if x > v), default=v)
    return sorted({x for x in ((lo + v) // 2, (v + hi + 1) // 2) if x in values and x != v})


# ---------------------------------------------------------------------------
# The CPU split: threads per process and loader workers, as one dimension.

MAX_SPLITS = 12          # every feasible split up to this many; beyond, the model's lattice


def cpu_splits(cpus: int, device: Device = CPU,
               max_workers: Optional[int] = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(every feasible (threads, workers) split, the first race's) for a process with ``cpus`` CPUs:
    docs/tune.md, "The CPU split" (threads at most 4 on a GPU; workers up to 2 x the CPUs within
    ``max_workers``; beyond ``MAX_SPLITS`` a coarse lattice, the splits nearest to using every CPU once)."""
    cpus = max(1, cpus)
    top_w = 2 * cpus if max_workers is None else max(0, min(2 * cpus, max_workers))
    top_t = cpus if device.is_cpu else min(cpus, 4)
    threads, workers = list(range(1, top_t + 1)), list(range(0, top_w + 1))
    every = [(t, w) for t in threads for w in workers]
    if len(every) <= MAX_SPLITS:
        return every, list(every)
    lattice = sorted(((t, w) for t in coarse(threads) for w in coarse(workers)), key=promise(cpus))
    return every, lattice[:MAX_SPLITS]


def promise(cpus: int) -> Callable[[tuple[int, int]], tuple[float, int, int]]:
    """The model's order of splits, most promising first: nearest to using every CPU once
    (threads + workers = CPUs), then more compute threads, then fewer workers."""
    def order(split: tuple[int, int]) -> tuple[float, int, int]:
        threads, workers = split
        return abs(math.log((threads + workers) / cpus)), -threads, workers

    return order


def outward(values: list, tried: set, v: Any) -> list:
    """When ``v`` is the largest (smallest) value tried and ``values`` go further, the next coarse
    value beyond it (2 -> 4 workers): a first race cut short by the budget must not fence the
    search in (on a data-bound workload the best split had more workers than any raced first)."""
    ladder = coarse(values)
    out = []
    if v >= max(tried, default=v):
        out += [x for x in ladder if x > v][:1]
    if v <= min(tried, default=v):
        out += [x for x in reversed(ladder) if x < v][:1]
    return out


def _split_refine(every: list) -> Callable[[set, Any], list]:
    feasible = set(every)
    ts = sorted({t for t, _ in every})
    ws = sorted({w for _, w in every})

    def refine(tried: set, winner: tuple) -> list:
        t, w = winner
        tt, tw = {a for a, _ in tried}, {b for _, b in tried}
        out = [(x, w) for x in bisect(ts, tt, t) + outward(ts, tt, t)]
        out += [(t, x) for x in bisect(ws, tw, w) + outward(ws, tw, w)]
        return [v for v in out if v in feasible]
    return refine


def split_dimension(cpus: int, device: Device = CPU, max_workers: Optional[int] = None) -> Dimension:
    """The split of a process's CPUs between compute threads and loader workers (tune.M006)."""
    every, first = cpu_splits(cpus, device, max_workers)
    first = sorted(first, key=promise(cpus))   # a small budget races the most promising only

    def apply(s: Settings, v: tuple) -> Settings:
        return _apply_workers(s.replace(threads=v[0]), v[1])

    return Dimension(SPLIT, every, "tune.M006", apply=apply,
                     read=lambda s: (s.threads or cpus, s.num_workers), fields=("threads", "num_workers"),
                     first=first, refine=_split_refine(every),
                     show=lambda v: f"threads={v[0]} workers={v[1]}",
                     unit=f"splits of {cpus} CPU{'s' if cpus > 1 else ''}")


def default_space(start: Settings, device: Device, per_proc_cpus: int, precisions: list[str], conv: bool,
                  max_workers: Optional[int] = None) -> list[Dimension]:
    """The dimensions ``--measure`` explores, made from the settings' declarations (their ``search``,
    :mod:`debtorch.train.settings`), in their order: precision and memory format (cheap at the rules'
    split), the CPU split, then prefetch, pinned memory (any accelerator) and persistent workers (a
    simulated one).  Processes stay as the rules chose them: trials run one process."""
    dims: list[Dimension] = []
    for declared in sorted((s for s in SETTINGS if s.search is not None), key=_race_order):
        how = declared.search
        assert how is not None
        if not _raced_here(how, device, conv):
            continue
        if how.split:
            if not any(d.name == SPLIT for d in dims):
                dims.append(split_dimension(per_proc_cpus, device, max_workers))
            continue
        values = list(how.values or precisions)
        if len(values) > 1:
            dims.append(_dimension(declared.name, values, how))
    return dims


SPLIT = "split"   # the CPU split's dimension: threads and loader workers raced as one (tune.M006)


def _race_order(declared: Setting) -> int:
    return declared.search.order if declared.search is not None else 0


def _raced_here(how: Searched, device: Device, conv: bool) -> bool:
    """Whether a setting is raced for ``device`` and this workload (``conv``: a convolutional model)."""
    if how.when == "accelerator":
        return device.accelerator
    if how.when == "simulated":
        return device.simulated
    if how.when == "convolutional":
        return conv
    return True


def _has_workers(s: Settings) -> bool:
    return s.num_workers > 0


def _dimension(name: str, values: list[Any], how: Searched) -> Dimension:
    """The dimension of a declared setting: its values, the fields set with it, what it needs."""
    fields = (name, *how.together)
    apply = None
    if how.together:
        def apply(s: Settings, v: Any) -> Settings:
            return s.replace(**dict.fromkeys(fields, v))
    return Dimension(name, values, how.rule, apply=apply, needs=_has_workers if how.needs_workers else None,
                     fields=fields if how.together else ())


def dim_value(dim: Dimension, s: Settings) -> Any:
    """``dim``'s value in the rules' settings ``s``, or where it means nothing there (prefetch without
    workers), its first candidate (the rules' companion: prefetch 2, persistent workers)."""
    return dim.get(s) if dim.active(s) and dim.get(s) in dim.values else dim.values[0]


def joint(a: Dimension, b: Dimension, values: list[Any]) -> Dimension:
    """Two dimensions raced together: their values are pairs."""
    def apply(s: Settings, v: tuple[Any, Any]) -> Settings:
        return b.with_value(a.with_value(s, v[0]), v[1])

    def needs(s: Settings) -> bool:
        return a.active(s) and b.active(s)

    def read(s: Settings) -> tuple[Any, Any]:
        return a.get(s), b.get(s)

    def show(v: tuple[Any, Any]) -> str:
        return f"{a.label(v[0])} {b.label(v[1])}"

    return Dimension(f"{a.name}+{b.name}", values, a.rule, apply=apply, needs=needs, read=read,
                     fields=a.decides() + b.decides(), show=show)


class Decided(str, Enum):
    """How the search decided a dimension: the kind of its :class:`Choice`, never read back from its text."""

    LED = "led"                  # a value led the others: beyond noise, or the likelier of two
    KEPT = "kept"                # the incumbent kept: some values slower, the others as fast within noise
    SAME = "no difference"       # no measurable difference among the values: the incumbent kept (tune.M005)
    UNMEASURED = "unmeasured"    # never raced: no effect in this context, or no trial succeeded (tune.M005)


@dataclass(frozen=True)
class Choice:
    """What the search decided for one dimension, and why."""

    dimension: str
    value: Any
    rule: str                     # the reason's id: the dimension's, or tune.M005 (no difference, unmeasured)
    text: str
    changed: bool
    kind: Decided = Decided.LED
    settled: bool = False         # beyond noise against every other value tried
    fields: tuple[str, ...] = ()  # the settings fields the reason is about (default: the dimension's name)
    joint: bool = False           # raced together with a dimension it interacts with

    @property
    def measured(self) -> bool:
        """False: never raced (no effect in this context, or no trial succeeded); the rule's reason stands."""
        return self.kind is not Decided.UNMEASURED

    @property
    def no_difference(self) -> bool:
        """The incumbent kept for want of a measured difference (tune.M005): none showed, or none was raced."""
        return self.kind in (Decided.SAME, Decided.UNMEASURED)


@dataclass(frozen=True)
class Contribution:
    """What one changed choice contributes where the search ended: the chosen settings over the same with
    that choice back at the rules' value (``estimate`` None when that point was not measured)."""

    dimension: str
    change: str                           # 'num_workers=2 (rules: w0 fp32)'
    estimate: Optional[stats.Estimate]

    def to_json(self) -> dict[str, Any]:
        figure = self.estimate.to_dict("ratio") if self.estimate is not None else {"ratio": None}
        return {"dimension": self.dimension, "change": self.change, **figure}


@dataclass(frozen=True)
class Result:
    """What a search measured and decided: tune's measurement (its :meth:`to_json` is the JSON's)."""

    best: Settings
    start: Settings
    trials: list[Trial] = field(default_factory=list)
    choices: dict[str, Choice] = field(default_factory=dict)   # dimension name -> Choice
    spent: float = 0.0
    budget: float = 0.0
    stopped: str = ""                               # why the search ended
    runner_up: Optional[Settings] = None            # the fastest other settings measured
    within_noise: bool = False                      # best does not beat runner_up beyond noise
    noise: float = 0.0                              # relative noise of one trial (robust sigma of log samples/s)
    interactions: list[tuple[str, str]] = field(default_factory=list)  # pairs of dimensions found to interact
    steps_per_trial: Optional[int] = None           # set by the caller (tune.measure)
    looks: Optional[stats.Looks] = None             # the sequential design "beyond noise" was judged by
    reserve: float = 0.0                            # seconds of the budget held for stopping the worker (tune.measure)

    def median(self, s: Settings) -> Optional[float]:
        vals = self.samples(s)
        return statistics.median(vals) if vals else None

    def samples(self, s: Settings) -> list[float]:
        return [t.samples_per_s for t in self.trials if key(t.settings) == key(s) and t.samples_per_s is not None]

    def contributions(self) -> list[Contribution]:
        """What each changed choice contributes where the search ended: the chosen settings over the
        same with that choice back at the rules' value, when the search measured that point (no
        extra trial: the ratio of medians with its interval, unpaired)."""
        out = []
        for name, choice in self.choices.items():
            fields = choice.fields or (name,)
            if not choice.measured or all(getattr(self.best, f) == getattr(self.start, f) for f in fields):
                continue
            back: dict[str, None] = dict.fromkeys(fields)
            if "num_workers" in fields and not self.start.num_workers:
                back.update(dict.fromkeys(("prefetch_factor", "persistent_workers", "start_method")))
            without = self.best.replace(**{f: getattr(self.start, f) for f in back})
            words = ", ".join(f"{f}={getattr(self.best, f)}" for f in fields
                              if getattr(self.best, f) != getattr(self.start, f))
            mine, theirs = self.samples(self.best), self.samples(without)
            est = stats.compare(mine, theirs, paired=False) if mine and theirs else None
            out.append(Contribution(name, f"{words} (rules: {without.short()})", est))
        return out

    def close_call(self) -> str:
        """'' when the choice leads beyond noise, else 'within noise of <settings> (<median> samples/s)'."""
        if not self.within_noise or self.runner_up is None:
            return ""
        med = self.median(self.runner_up)
        return f"within noise of {self.runner_up.short()}" + (f" ({med:.1f} samples/s)" if med else "")

    def to_json(self, load: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """tune's ``measurement``; ``load``: whether the machine was busy meanwhile (tune read it)."""
        within = self.runner_up.short() if self.within_noise and self.runner_up else None
        return {"spent_s": self.spent, "budget_s": self.budget, "reserve_s": self.reserve, "stopped": self.stopped,
                "noise": self.noise,
                "sequential": self.looks.to_dict() if self.looks else None, "within_noise_of": within,
                "interactions": [list(p) for p in self.interactions],
                "contributions": [c.to_json() for c in self.contributions()], "load": load,
                "trials": [t.to_json() for t in self.trials]}


class BudgetSpent(Exception):
    pass


_FIELDS = tuple(f.name for f in dataclasses.fields(Settings))


def key(s: Settings) -> tuple:
    """A hashable identity for settings (Settings itself is a mutable dataclass; its fields are
    all scalars, so no deep copy is needed)."""
    return tuple(getattr(s, f) for f in _FIELDS)


def unique(items: list[Settings]) -> list[Settings]:
    seen: dict[tuple, Settings] = {}
    for s in items:
        seen.setdefault(key(s), s)
    return list(seen.values())


class Search:
    """One dimension at a time (precision, memory format, the split, the rest), then interactions,
    with interleaved, repeated races.  See the module doc."""

    def __init__(self, trial: TrialFn, budget_s: float, repeats: int = 3, max_repeats: int = 7,
                 min_gain: float = 0.03, z: float = 2.0,
                 on_trial: Optional[Callable[[Trial, float, float], None]] = None, passes: int = 2,
                 interactions: bool = True, top: int = 3, clock: Optional[Callable[[], float]] = None,
                 switch_z: float = 0.0):
        self.trial_fn = trial
        self.budget = float(budget_s)
        self.repeats = max(2, repeats)
        self.max_repeats = max(self.repeats, max_repeats)
        self.z = z                # "practically equal": a difference of twice ``min_gain`` would show by z se
        self.looks = stats.Looks(2, 3 * self.max_repeats)   # a pair's race, a revisit and the settle race (2x)
        self.min_gain = min_gain
        self.switch_z = switch_z  # a replay knob (benchmarks/tune_replay.py); tune keeps 0: the higher median wins
        self.on_trial = on_trial
        self.passes = passes
        self.interactions = interactions
        self.top = max(2, top)
        self.trials: list[Trial] = []
        self.samples: dict[tuple, list[float]] = {}   # key(Settings) -> [samples/s]
        self.errors: dict[tuple, str] = {}            # key(Settings) -> error text
        self.known: dict[tuple, Settings] = {}        # key(Settings) -> Settings
        self.longest: dict[tuple, float] = {}         # key(Settings) -> its longest trial, in seconds
        self.ranking: dict[str, list[Any]] = {}       # dimension name -> its values, fastest first, where last raced
        self.found: list[tuple[str, str]] = []        # interacting pairs of dimension names
        self.best = Settings()    # the best settings decided so far (run() starts from its own)
        self.spent = 0.0          # seconds: by ``clock`` from the start when given, else the trials' own
        self.clock = clock
        self.t0 = clock() if clock is not None else 0.0
        self.phase = "start"

    # -- measuring ---------------------------------------------------------
    def _cost_estimate(self, s: Settings) -> float:
        """What the next trial of ``s`` may cost: its own longest so far, else the longest
        of the last few trials (pessimistic, so that the budget holds)."""
        own = self.longest.get(key(s))
        return own if own is not None else max([t.seconds for t in self.trials[-5:]] or [0.0])

    def measure(self, s: Settings) -> Optional[float]:
        if key(s) in self.errors:
            return None
        if self.trials and self.spent + self._cost_estimate(s) > self.budget:
            raise BudgetSpent()
        out = self.trial_fn(s)
        # With a clock, whatever happens between trials (a worker restarted after it died) counts too.
        self.spent = self.clock() - self.t0 if self.clock is not None else self.spent + max(0.0, out.seconds)
        t = Trial(len(self.trials) + 1, self.phase, s, out.samples_per_s, out.seconds, out.data_wait, out.error)
        self.trials.append(t)
        self.known[key(s)] = s
        self.longest[key(s)] = max(self.longest.get(key(s), 0.0), out.seconds)
        if out.samples_per_s is None:
            self.errors[key(s)] = out.error or "failed"
        else:
            self.samples.setdefault(key(s), []).append(out.samples_per_s)
        if self.on_trial:
            self.on_trial(t, self.spent, self.budget)
        return out.samples_per_s

    def med(self, s: Settings) -> Optional[float]:
        """The median samples/s of ``s``; None before a trial of it succeeded."""
        vals = self.samples.get(key(s))
        return statistics.median(vals) if vals else None

    def rate(self, s: Settings) -> float:
        """The median samples/s of ``s``, 0 before a trial of it succeeded (for ordering and cuts)."""
        return self.med(s) or 0.0

    def n(self, s: Settings) -> int:
        return len(self.samples.get(key(s), []))

    def sigma(self) -> float:
        """Robust relative noise: the spread of log(samples/s) around each config's median, pooled over
        configs measured at least twice (MAD x 1.4826); 5% until then; never below 1%."""
        return self._noise()[0]

    def _noise(self) -> tuple[float, float, int]:
        """(sigma, the pooled standard deviation of log samples/s with every residual clipped at 3 sigma
        (Huber's winsorising: a trial another process slowed counts as a 3-sigma one), its degrees of freedom)."""
        groups = [[math.log(v) for v in vals if v > 0] for vals in self.samples.values()]
        groups = [g for g in groups if len(g) >= 2]
        res = [abs(x - m) * math.sqrt(len(g) / (len(g) - 1)) for g in groups for m in [statistics.median(g)]
               for x in g if x != m]
        if not res:
            return 0.05, 0.05, 0
        sigma = max(0.01, 1.4826 * statistics.median(res))
        ss = math.fsum(min(3 * sigma, abs(x - mu)) ** 2 for g in groups for mu in [math.fsum(g) / len(g)] for x in g)
        df = sum(len(g) - 1 for g in groups)
        return sigma, max(0.01, math.sqrt(ss / df)), df

    def _se(self, na: int, nb: int, sigma: Optional[float] = None) -> float:
        """Standard error of a difference of two medians (in logs): a median's is 1.25x a mean's."""
        return 1.2533 * (sigma or self.sigma()) * math.sqrt(1 / na + 1 / nb)

    def better(self, a: Settings, b: Settings, margin: float = 0.0) -> bool:
        """Is ``a`` faster than ``b`` beyond noise (and by ``min_gain``)?  Their difference of medians (in logs)
        less Student's t at the level of ``self.looks`` times its standard error must exceed ``margin``."""
        ma, mb = self.med(a), self.med(b)
        _, sd, df = self._noise()
        if ma is None or mb is None or ma <= 0 or mb <= 0 or df < 1:
            return False
        d = math.log(ma) - math.log(mb)
        t = stats.t_quantile((1 + self.looks.confidence) / 2, df)
        return d > math.log1p(self.min_gain) and d - t * self._se(self.n(a), self.n(b), sd) > math.log1p(margin)

    def confirmed(self, a: Settings, b: Settings) -> bool:
        """Is ``a`` faster than ``b`` by enough to claim an interaction?  Both measured ``repeats`` times
        (a median of two cannot outvote an outlier), the interval above 1 + ``min_gain`` (many pairs are
        probed: a claim must not come from noise)."""
        while min(self.n(a), self.n(b)) < self.repeats:
            for c in (a, b) if self.n(a) <= self.n(b) else (b, a):
                if self.n(c) < self.repeats and self.measure(c) is None:
                    return False
        return self.better(a, b, self.min_gain)

    def ahead(self, a: Settings, b: Settings) -> bool:
        """Is ``a``'s median ahead of ``b``'s by at least ``min_gain`` (and ``switch_z`` standard errors)?
        After a race that could not separate them further, the higher median is the better bet."""
        ma, mb = self.med(a), self.med(b)
        if ma is None or mb is None or ma <= 0 or mb <= 0:
            return False
        need = math.log1p(self.min_gain)
        if self.switch_z:
            need = max(need, self.switch_z * self._se(max(1, self.n(a)), max(1, self.n(b))))
        return math.log(ma) - math.log(mb) > need

    # -- a race between candidates ----------------------------------------
    def race(self, cands: list[Settings]) -> list[Settings]:
        """Measure ``cands`` round by round in rotating order, dropping the clearly slower;
        return the survivors (the leader first)."""
        alive = [c for c in unique(cands) if key(c) not in self.errors]
        rnd = 0
        while alive and rnd < self.max_repeats:
            k = rnd % len(alive)
            order = alive[k:] + alive[:k]
            if rnd % 2:
                order.reverse()
            for c in order:
                self.measure(c)
            rnd += 1
            alive = [c for c in alive if key(c) not in self.errors]
            if len(alive) <= 1:
                break
            lead = self._leader(alive)
            assert lead is not None   # every one alive has a trial that succeeded
            if rnd == 1:
                # Only the hopeless after one sample: below half the leader, and further below
                # than the noise seen so far could explain (a busy machine only ever slows a trial).
                cut = self.rate(lead) * min(0.5, math.exp(-4 * self.sigma()))
                alive = [c for c in alive if self.rate(c) >= cut]
            else:
                alive = [c for c in alive if c is lead or not self.better(lead, c)]
            if rnd >= self.repeats and len(alive) > 2:
                # Successive halving: a large field keeps its better half.
                alive = sorted(alive, key=lambda c: -self.rate(c))[:max(2, math.ceil(len(alive) / 2))]
            if len(alive) <= 1:
                break
            if rnd >= self.repeats and all(self._practically_equal(lead, c) for c in alive):
                break  # what is left is practically equal, and a difference of twice that would have shown
        lead = self._leader(alive)
        return [lead] + [c for c in alive if c is not lead] if lead is not None else alive

    def _practically_equal(self, lead: Settings, c: Settings) -> bool:
        """``c`` within ``min_gain`` of ``lead``, and the noise small enough that a difference of twice that
        would have shown."""
        return (math.log(self.rate(lead)) - math.log(self.rate(c)) <= math.log1p(self.min_gain)
                and self.z * self._se(self.n(lead), self.n(c)) <= math.log1p(2 * self.min_gain))

    # -- the search ---------------------------------------------------------
    def run(self, start: Settings, dims: list[Dimension]) -> Result:
        """Each dimension in order, then interactions, then close calls, within the budget."""
        self.best = start
        choices: dict[str, Choice] = {}
        stopped = "no dimension left to improve"
        try:
            self.phase = "start"
            if self.measure(start) is None:
                raise RuntimeError(f"the starting settings failed: {self.errors[key(start)]}")
            if not self._small_space(start, dims, choices):
                self._passes(dims, choices)
                if self.interactions:
                    self._probe_pairs(dims, choices)
            self._refine(dims, choices)
        except BudgetSpent:
            stopped = "budget spent"  # the caller's table names the whole budget; this is only the search's share
        best = self.best
        for dim in dims:
            if dim.name in choices:
                choices[dim.name] = dataclasses.replace(choices[dim.name], changed=dim.get(best) != dim.get(start))
        runner_up, within_noise = self._runner_up(best)
        return Result(best=best, start=start, trials=self.trials, choices=choices, spent=self.spent,
                      budget=self.budget, stopped=stopped, runner_up=runner_up, within_noise=within_noise,
                      noise=self.sigma(), interactions=list(self.found), looks=self.looks)

    def _small_space(self, start: Settings, dims: list[Dimension], choices: dict[str, Choice]) -> bool:
        """docs/tune.md's "A small space": measured whole when one pass fits half the budget left; its
        ``2 x top`` best race, and the winner races each of its settings back at the rules' value."""
        points = grid_points(start, dims)
        if len(points) * max(t.seconds for t in self.trials) > (self.budget - self.spent) / 2:
            return False
        best, leaders, todo = start, [], list(dims)
        try:
            self.phase = "grid"
            for p in points:
                if not self.n(p):
                    self.measure(p)
            self.phase = "leaders"
            measured = sorted((p for p in points if self.med(p)), key=lambda p: -self.rate(p))
            leaders = self.race(measured[: 2 * self.top])
            best = self._leader(leaders) or start
            while todo:
                dim, rule = todo[0], dim_value(todo[0], start)
                if dim.active(best) and dim.get(best) != rule:
                    self.phase = dim.name
                    self.race([best, dim.with_value(best, rule)])
                    self._rank(dim, best)
                    best, choices[dim.name] = self._choose(dim, best, dim.with_value(best, rule), best)
                todo.pop(0)
        finally:  # the budget may end on the way: what was not raced back is decided on what was measured
            if not leaders:
                best = self._leader([p for p in points if self.med(p)]) or start
            self.best = best
            for dim in dims:
                if dim.name not in choices or dim in todo:
                    self._rank(dim, best)
                    if dim.active(best) and len(self._tried(dim, best)) > 1:
                        choices[dim.name] = self._choose(dim, best, best, best)[1]
                    else:
                        choices[dim.name] = _unmeasured(dim, best)
        return True

    def _passes(self, dims: list[Dimension], choices: dict[str, Choice], changed: tuple = ()) -> None:
        """One dimension at a time from ``self.best``, revisiting one only when another changed after it
        was decided (``changed``: since the earlier choices); a revisit that changes the winner interacts."""
        changes = list(changed)
        decided_at: dict = {d.name: (len(changes) if d.name in changed else 0) for d in dims if d.name in choices}
        settled = {name for name, c in choices.items() if c.settled}
        best = self.best
        for _ in range(self.passes):
            raced = False
            for dim in dims:
                if dim.name in settled:
                    continue
                since = changes[decided_at.get(dim.name, 0):]
                if dim.name in decided_at and not any(n != dim.name for n in since):
                    continue  # decided, and nothing else changed since
                revisit = dim.name in decided_at
                decided_at[dim.name] = len(changes)
                if not dim.active(best):
                    if dim.name not in choices or not choices[dim.name].measured:
                        choices[dim.name] = _unmeasured(dim, best)
                    continue
                self.phase = dim.name + (" (again)" if revisit else "")
                raced = True
                before = dim.get(best)
                try:
                    new_best, choice = self._dimension(best, dim, revisit)
                except _Stop as stop:
                    if stop.choice is not None:
                        choices[dim.name] = stop.choice
                    raise BudgetSpent() from None
                if choice is not None:
                    choices[dim.name] = choice
                    if choice.settled:
                        settled.add(dim.name)
                if key(new_best) != key(best):
                    best = self.best = new_best
                    changes.append(dim.name)
                    if revisit and dim.get(best) != before and self.confirmed(best, dim.with_value(best, before)):
                        for other in dict.fromkeys(n for n in since if n != dim.name):
                            self._interacts(dim.name, other)
                decided_at[dim.name] = len(changes)
            if not raced:
                break

    def _interacts(self, a: str, b: str) -> None:
        pair = (a, b) if a <= b else (b, a)
        if pair not in self.found:
            self.found.append(pair)

    def _tried(self, dim: Dimension, context: Settings) -> dict:
        """value -> settings, for the values of ``dim`` measured in ``context`` (nothing else different)."""
        out = {}
        for k, c in self.known.items():
            if k in self.samples:
                v = dim.get(c)
                if key(dim.with_value(context, v)) == k:
                    out[v] = c
        return out

    def _rank(self, dim: Dimension, context: Settings) -> None:
        tried = self._tried(dim, context)
        self.ranking[dim.name] = sorted(tried, key=lambda v: -self.rate(tried[v]))

    def _dimension(self, best: Settings, dim: Dimension, revisit: bool = False) -> tuple[Settings, Optional[Choice]]:
        """Race one dimension from ``best``: (new best, Choice); a revisit races the values that were best
        where it was last raced.  When the budget runs out: _Stop with what it could decide, if anything."""
        current = dim.get(best)
        first = dim.first_values()
        if revisit and self.ranking.get(dim.name):
            first = self.ranking[dim.name][: self.top]
        first = [current] + [v for v in first if v != current][: self._fits(len(first)) - 1]
        incumbent = dim.with_value(best, current)
        cands = [dim.with_value(best, v) for v in first]
        try:
            alive = self.race(cands)
            winner = self._leader(alive) or incumbent
            tried = set(first)
            while True:  # coarse-to-fine: race the winner against new values near it
                more = dim.more(tried, dim.get(winner))
                if not more:
                    break
                tried.update(more)
                alive = self.race([winner] + [dim.with_value(best, x) for x in more])
                lead = self._leader(alive)
                if lead is None or not self.ahead(lead, winner):
                    break   # nothing nearby does better: no wandering on a plateau
                winner = lead
        except BudgetSpent:
            measured = [c for c in self._tried(dim, best).values() if self.n(c) >= 2]
            if key(incumbent) not in {key(c) for c in measured} or len(measured) < 2:
                raise _Stop() from None   # too little to decide: keep the rule's value
            winner = self._leader(measured) or incumbent
            self.best, choice = self._choose(dim, best, incumbent, winner)
            raise _Stop(choice) from None
        self._rank(dim, best)
        return self._choose(dim, best, incumbent, winner)

    def _fits(self, n: int) -> int:
        """How many candidates a first race may have: all ``n`` when ``repeats`` rounds of them fit
        half the budget left (the rest is for the other settings), else as many as do, at least 2."""
        took = statistics.median(t.seconds for t in self.trials) if self.trials else 0.0
        if took <= 0 or not math.isfinite(self.budget):
            return n
        return max(2, min(n, int((self.budget - self.spent) / 2 / (took * self.repeats))))

    # -- interactions ---------------------------------------------------------
    def _runner_value(self, dim: Dimension, best: Settings) -> Any:
        """The dimension's best value other than the chosen one, where it was last raced."""
        current = dim.get(best)
        return next((v for v in self.ranking.get(dim.name, []) if v != current), None)

    def _probe_pairs(self, dims: list[Dimension], choices: dict[str, Choice]) -> None:
        """docs/tune.md's "Interactions": every pair's corner of runners-up, measured once and raced when
        it beats the incumbent; a pair that beats both changes alone interacts and is raced together,
        else a change alone that does as well was misjudged and takes its better value."""
        for a, b in itertools.combinations(dims, 2):
            best = self.best
            if not (a.active(best) and b.active(best)):
                continue
            va, vb = self._runner_value(a, best), self._runner_value(b, best)
            if va is None or vb is None:
                continue
            cross = b.with_value(a.with_value(best, va), vb)
            if key(cross) == key(best) or key(cross) in self.errors or not (a.active(cross) and b.active(cross)):
                continue
            self.phase = f"{a.name} x {b.name}"
            if key(cross) not in self.samples:
                v = self.measure(cross)
                if v is None or v <= self.rate(best):
                    continue  # one trial, and not even above the incumbent's median
            self.race([best, cross])
            if not self.ahead(cross, best):
                continue
            alone = [c for c in (a.with_value(best, va), b.with_value(best, vb)) if a.active(c) and b.active(c)]
            self.race([cross] + alone)
            if self.confirmed(cross, best) and all(self.confirmed(cross, c) for c in alone):
                self._interacts(a.name, b.name)
                self._together(a, b, choices)
                self._passes(dims, choices, (a.name, b.name))
                continue
            lead = self._leader([best, cross] + alone)
            if lead is None or not self.ahead(lead, best):
                continue
            for d in (a, b):   # a main effect the first race missed: take it, with its reason
                if d.get(lead) != d.get(best):
                    choices[d.name] = self._choose(d, lead, d.with_value(lead, d.get(best)), lead)[1]
            self.best = lead
            self._passes(dims, choices, tuple(d.name for d in (a, b) if d.get(lead) != d.get(best)))

    def _together(self, a: Dimension, b: Dimension, choices: dict[str, Choice]) -> None:
        """Race the best values of two interacting dimensions in every combination."""
        best = self.best

        def tops(d: Dimension) -> list:
            ranked = self.ranking.get(d.name) or []
            return list(dict.fromkeys([d.get(best)] + ranked[: self.top]))[: self.top]

        values = [(x, y) for x in tops(a) for y in tops(b)]
        j = joint(a, b, values)
        cands = unique([c for c in (j.with_value(best, v) for v in values) if j.active(c)])
        self.phase = j.name
        alive = self.race([best] + cands)
        winner = self._leader(alive) or best
        for d in (a, b):
            self._rank(d, winner)
        new_best, choice = self._choose(j, best, best, winner)
        text = choice.text + f" ({a.name} and {b.name} interact: raced together)"
        for d in (a, b):
            rule = choice.rule if choice.no_difference else d.rule
            choices[d.name] = Choice(d.name, d.get(new_best), rule, text, False, kind=choice.kind,
                                     settled=choice.settled, fields=d.decides(), joint=True)
        self.best = new_best

    # -- close calls ------------------------------------------------------------
    def _alternatives(self, dim: Dimension, best: Settings) -> list:
        current = dim.get(best)
        if len(dim.values) <= 3:
            return [v for v in dim.values if v != current]
        ranked = [v for v in self.ranking.get(dim.name, []) if v != current][:2]
        return list(dict.fromkeys(ranked + dim.more(set(), current)))

    def _refine(self, dims: list[Dimension], choices: dict[str, Choice]) -> None:
        """With budget left, settle every choice not made beyond noise: its value against the alternatives
        *where the search ended up* (an early choice was made in another context), with more repeats."""
        for dim in dims:
            best = self.best
            choice = choices.get(dim.name)
            if choice is None or choice.settled or not dim.active(best):
                continue
            alternatives = self._alternatives(dim, best)
            if not alternatives:
                continue
            self.phase = dim.name + " (settle)"
            saved = self.max_repeats
            self.max_repeats = 2 * saved
            try:
                alive = self.race([best] + [dim.with_value(best, v) for v in alternatives])
            finally:
                self.max_repeats = saved
            winner = self._leader(alive) or best
            new_best, settled_choice = self._choose(dim, best, best, winner)
            kept = key(new_best) == key(best)
            if kept and choice.joint:
                pass   # an interacting pair's joint choice stands where the settle race kept its value
            elif not kept or not settled_choice.no_difference or choice.no_difference:
                choices[dim.name] = settled_choice
            self.best = new_best

    def _runner_up(self, best: Settings) -> tuple[Optional[Settings], bool]:
        """(the fastest other settings measured, whether ``best`` fails to beat it beyond noise)."""
        others = [c for k, c in self.known.items() if k in self.samples and k != key(best)]
        runner = self._leader(others)
        if runner is None or self.med(best) is None:
            return runner, False
        return runner, not self.better(best, runner)

    # -- choosing ----------------------------------------------------------------
    def _equivalent(self, c: Settings, others: list[Settings]) -> bool:
        """Clearly no difference: every other median within ``min_gain`` of ``c``'s, and the noise small
        enough that a real difference of twice that would have shown."""
        if not others:
            return False
        for o in others:
            if not (self.rate(c) and self.rate(o)):
                return False
            gap = abs(math.log(self.rate(c) / self.rate(o)))
            if gap + self.z * self._se(self.n(c), self.n(o)) > math.log1p(2 * self.min_gain):
                return False
        return True

    def _beats_all(self, c: Settings, dim: Dimension, best: Settings) -> bool:
        others = [o for k, o in self._tried(dim, best).items() if key(o) != key(c)]
        return bool(others) and all(self.better(c, o) for o in others)

    def _leader(self, alive: list[Settings]) -> Optional[Settings]:
        """The fastest of ``alive`` by median (the first of equals), None when none was measured."""
        measured = [c for c in alive if self.med(c) is not None]
        return max(measured, key=self.rate) if measured else None

    def _choose(self, dim: Dimension, best: Settings, incumbent: Settings,
                winner: Settings) -> tuple[Settings, Choice]:
        n = self.n

        def label(c: Settings) -> str:
            return dim.label(dim.get(c))

        raced = f"; {len(self._tried(dim, best))} {dim.unit} raced" if dim.unit else ""
        fields = dim.decides()
        if self.med(incumbent) is None:
            return best, _unmeasured(dim, incumbent, "")

        def leads(a: Settings, b: Settings, changed: bool, likelier: str = "") -> tuple[Settings, Choice]:
            text = (f"{label(a)}: {self.med(a):.1f} samples/s vs {self.med(b):.1f} with {label(b)}, "
                    f"median of {min(n(a), n(b))}{raced}")
            if not self.better(a, b):
                text += f" (within noise {self.sigma():.1%}{likelier})"
            return a, Choice(dim.name, dim.get(a), dim.rule, text, changed, Decided.LED,
                             self._beats_all(a, dim, best), fields=fields)

        if key(winner) != key(incumbent) and self.ahead(winner, incumbent):
            return leads(winner, incumbent, True, ": the likelier of the two")
        others = [c for c in self._tried(dim, best).values() if key(c) != key(incumbent)]
        runner = self._leader(others)
        if runner is not None and self.ahead(incumbent, runner):
            return leads(incumbent, runner, False)
        slower = [c for c in others if self.better(incumbent, c)]
        if runner is not None and slower:
            close = [c for c in others if c not in slower]
            text = (f"{label(incumbent)}: {self.med(incumbent):.1f} samples/s, median of {n(incumbent)}; "
                    f"{_values(dim, close)} as fast within noise, {_values(dim, slower)} slower{raced}")
            return incumbent, Choice(dim.name, dim.get(incumbent), dim.rule, text, False, Decided.KEPT, False,
                                     fields=fields)
        tried = _values(dim, others + [incumbent])
        text = (f"{dim.name}: no measurable difference among {tried} "
                f"(noise {self.sigma():.1%}); {_short(dim, dim.get(incumbent))} kept{raced}")
        return incumbent, Choice(dim.name, dim.get(incumbent), "tune.M005", text, False, Decided.SAME,
                                 self._equivalent(incumbent, others), fields=fields)


def _unmeasured(dim: Dimension, s: Settings, why: Optional[str] = None) -> Choice:
    """``dim`` never raced: no effect in settings ``s`` (``why`` says otherwise), or no trial succeeded."""
    why = f": no effect with {s.short()}" if why is None else why
    return Choice(dim.name, dim.get(s), "tune.M005", f"{dim.name} not measured{why}", False, Decided.UNMEASURED,
                  fields=dim.decides())


class _Stop(Exception):
    """The budget ran out inside a decision: the choice it could still make, if any."""

    def __init__(self, choice: Optional[Choice] = None):
        super().__init__("budget spent")
        self.choice = choice


def _short(dim: Dimension, v: Any) -> str:
    return dim.show(v) if dim.show else _fmt(v)


def _values(dim: Dimension, configs: list, most: int = 4) -> str:
    vals = {dim.get(c) for c in configs}
    shown = [_short(dim, v) for v in dim.values if v in vals]
    return ", ".join(shown[:most]) + (f" and {len(shown) - most} more" if len(shown) > most else "")


# ---------------------------------------------------------------------------
# The exhaustive grid: the oracle that benchmarks/tune_bench.py compares against.


def grid_points(start: Settings, dims: list[Dimension]) -> list[Settings]:
    """Every combination of the dimensions' values; a dimension that means nothing
    for a point (prefetch without workers) adds no copies of it."""
    points = [start]
    for dim in dims:
        nxt = []
        for s in points:
            nxt.extend([dim.with_value(s, v) for v in dim.values] if dim.active(s) else [s])
        points = unique(nxt)
    return points


def run_grid(trial: TrialFn, points: list[Settings], repeats: int = 3,
             on_trial: Optional[Callable[[Trial, float, float], None]] = None) -> Result:
    """Measure every point ``repeats`` times, interleaved (each round visits every point)."""
    s = Search(trial, budget_s=float("inf"), repeats=repeats, on_trial=on_trial)
    s.phase = "grid"
    for rnd in range(repeats):
        order = points if rnd % 2 == 0 else list(reversed(points))
        for p in order:
            s.measure(p)
    best = max((p for p in points if s.med(p) is not None), key=s.rate)
    return Result(best=best, start=points[0], trials=s.trials, choices={}, spent=s.spent, budget=s.spent,
                  stopped="grid done", noise=s.sigma())
