"""``debtorch verify-train --plot FILE``: throughput, where a step's time goes, and the loss curves.

matplotlib (the ``[plot]`` extra) is imported only when a plot is checked or drawn.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO, Optional

from debtorch import outputs
from debtorch.verify import analysis
from debtorch.verify.measure import Measured
from debtorch.verify.results import ArmSummary, Summary

PLOT_FORMATS = (".png", ".svg")


class PlotError(Exception):
    """--plot cannot be written; one line."""


def check_plot_path(path: str, force: bool = False) -> None:
    """Refuse a bad --plot early (before minutes of measuring); an existing file only with ``force``."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in PLOT_FORMATS:
        raise PlotError(f"--plot {path}: the file name must end in .png or .svg")
    try:
        outputs.check_destination(path, force)
    except outputs.OutputError as exc:
        raise PlotError(f"--plot {exc}") from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'debtorch[plot]' "
                        "(or apt install python3-matplotlib)") from None


@dataclass(frozen=True)
class _Bar:
    """A bar of the throughput panel: its median and range, and its bound (None: no bound drawn)."""

    name: str
    samples_per_s: Optional[float]
    low: Optional[float]
    high: Optional[float]
    bound: Optional[float]

    @classmethod
    def of(cls, name: str, arm: ArmSummary, bound: Optional[float]) -> "_Bar":
        return cls(name, arm.samples_per_s, arm.samples_per_s_min, arm.samples_per_s_max, bound)


def _bars(m: Measured, summary: Summary) -> list[_Bar]:
    """Baseline, tuned and, when it ran, tuned in several processes, with their bounds."""
    simd = summary.sim
    bounds: list[Optional[float]]
    if simd is not None:
        bounds = [simd.rate, simd.rate]
    else:
        bounds = [summary.baseline_bound.samples_per_s, summary.tuned_bound.samples_per_s]
    bars = [_Bar.of("baseline", summary.baseline, bounds[0]), _Bar.of("tuned", summary.tuned, bounds[1])]
    sc = summary.scaling
    if sc is not None and sc.samples_per_s:
        vals = [r.samples_per_s for r in m.ddp if r.samples_per_s]
        bars.append(_Bar(f"tuned x{sc.nproc} proc", sc.samples_per_s, min(vals), max(vals), None))
    return bars


def plot(m: Measured, summary: Summary, path: str, force: bool = False) -> None:
    """Throughput (with spread and the compute-only bounds), the step-time breakdown and the loss curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = m.converge.runs()
    panels = 3 if conv else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.0))
    simd = summary.sim
    bars = _bars(m, summary)
    ax = axes[0]
    xs = list(range(len(bars)))
    med = [b.samples_per_s or 0 for b in bars]
    below = [max(0, (b.samples_per_s or 0) - (b.low or b.samples_per_s or 0)) for b in bars]
    above = [max(0, (b.high or b.samples_per_s or 0) - (b.samples_per_s or 0)) for b in bars]
    ax.bar(xs, med, yerr=[below, above], capsize=4, color=["#999999", "#2a7ab9", "#5aa05a"][: len(xs)],
           label="measured (min-max)")
    bounded = [(x, b.bound) for x, b in zip(xs, bars) if b.bound]
    if bounded:
        ax.scatter([x for x, _ in bounded], [y for _, y in bounded], marker="_", s=900, color="black", zorder=3,
                   label="device bound (simulated)" if simd else "compute-only bound")
    ax.set_xticks(xs)
    ax.set_xticklabels([b.name for b in bars])
    ax.set_ylabel("samples/s")
    ax.set_title("throughput")
    ax.legend(fontsize=8)

    ax = axes[1]
    arms = [summary.baseline, summary.tuned]
    data = [(a.data_wait_step_s or 0) * 1000 for a in arms]
    comp = [(a.compute_step_s or 0) * 1000 for a in arms]
    ax.bar([0, 1], comp, color="#2a7ab9", label="computing")
    ax.bar([0, 1], data, bottom=comp, color="#e08a2c", label="waiting for data")
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["baseline", "tuned"])
    ax.set_ylabel("ms per optimizer step (median)")
    ax.set_title("where a step's time goes")
    ax.legend(fontsize=8)

    if conv:
        ax = axes[2]
        for name, color, label in (("baseline", "#999999", "baseline"), ("tuned", "#2a7ab9", "tuned"),
                                   ("reference", "#5aa05a", "fp32 reference")):
            run = dict(conv).get(name)
            if run is not None:
                curve = analysis.running_means(run.all_losses)
                ax.plot(range(1, len(curve) + 1), curve, color=color, label=label)
        target = summary.convergence.target_loss if summary.convergence is not None else None
        if target is not None:
            ax.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"loss (running mean of {analysis.SMOOTH})")
        ax.set_title("convergence")
        ax.legend(fontsize=8)
    workload = m.workload.name if m.workload is not None else None
    where = simd.words if simd is not None else m.device
    fig.suptitle(f"debtorch verify-train: {workload} on {where}", fontsize=10)
    fig.tight_layout()

    def save(fh: BinaryIO) -> None:
        fig.savefig(fh, format=os.path.splitext(path)[1].lower().lstrip("."))

    try:
        # A temporary file created exclusively beside it, then linked (or, with --force,
        # renamed over a regular file): never written through a planted link.
        outputs.write_with(path, save, force)
    except outputs.OutputError as exc:
        raise PlotError(f"--plot {exc}") from None
    finally:
        plt.close(fig)
