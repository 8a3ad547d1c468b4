"""``debtorch verify-train --plot FILE``: throughput, where a step's time goes, and the loss curves.

matplotlib (the ``[plot]`` extra) is imported only when a plot is checked or drawn.
"""

from __future__ import annotations

import os

from debtorch import outputs
from debtorch.verify import analysis

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


def plot(m, summary: dict, path: str, force: bool = False) -> None:
    """Throughput (with spread and the compute-only bounds), the step-time breakdown and the loss curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = m.converge or {}
    panels = 3 if conv else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.0))
    names = ["baseline", "tuned"]
    arms = [summary["baseline"], summary["tuned"]]
    simd = summary.get("sim")
    bounds = [{"samples_per_s": simd["rate"]}] * 2 if simd else [summary["baseline_bound"], summary["tuned_bound"]]
    sc = summary.get("scaling")
    if sc and sc.get("samples_per_s"):
        names.append(f"tuned x{sc['nproc']} proc")
        vals = [r.get("samples_per_s") for r in m.ddp if r.get("samples_per_s")]
        arms.append({"samples_per_s": sc["samples_per_s"], "samples_per_s_min": min(vals),
                     "samples_per_s_max": max(vals)})
        bounds.append({})
    ax = axes[0]
    xs = list(range(len(names)))
    med = [a.get("samples_per_s") or 0 for a in arms]
    err = [[max(0, (a.get("samples_per_s") or 0) - (a.get("samples_per_s_min") or a.get("samples_per_s") or 0)) for a in arms],
           [max(0, (a.get("samples_per_s_max") or a.get("samples_per_s") or 0) - (a.get("samples_per_s") or 0)) for a in arms]]
    ax.bar(xs, med, yerr=err, capsize=4, color=["#999999", "#2a7ab9", "#5aa05a"][: len(xs)], label="measured (min-max)")
    bx = [x for x, b in zip(xs, bounds) if b.get("samples_per_s")]
    by = [b["samples_per_s"] for b in bounds if b.get("samples_per_s")]
    if by:
        ax.scatter(bx, by, marker="_", s=900, color="black", zorder=3,
                   label="device bound (simulated)" if simd else "compute-only bound")
    ax.set_xticks(xs)
    ax.set_xticklabels(names)
    ax.set_ylabel("samples/s")
    ax.set_title("throughput")
    ax.legend(fontsize=8)

    ax = axes[1]
    data = [(a.get("data_wait_step_s") or 0) * 1000 for a in arms[:2]]
    comp = [(a.get("compute_step_s") or 0) * 1000 for a in arms[:2]]
    ax.bar([0, 1], comp, color="#2a7ab9", label="computing")
    ax.bar([0, 1], data, bottom=comp, color="#e08a2c", label="waiting for data")
    ax.set_xticks([0, 1])
    ax.set_xticklabels(names[:2])
    ax.set_ylabel("ms per optimizer step (median)")
    ax.set_title("where a step's time goes")
    ax.legend(fontsize=8)

    if conv:
        ax = axes[2]
        for name, color in (("baseline", "#999999"), ("tuned", "#2a7ab9"), ("reference", "#5aa05a")):
            if r := conv.get(name):
                curve = analysis.running_means(analysis.all_losses(r))
                ax.plot(range(1, len(curve) + 1), curve, color=color,
                        label=name if name != "reference" else "fp32 reference")
        target = (summary.get("convergence") or {}).get("target_loss")
        if target is not None:
            ax.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:g}")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"loss (running mean of {analysis.SMOOTH})")
        ax.set_title("convergence")
        ax.legend(fontsize=8)
    fig.suptitle(f"debtorch verify-train: {(m.workload or {}).get('name')} on {(simd or {}).get('words') or m.device}",
                 fontsize=10)
    fig.tight_layout()
    try:
        # A temporary file created exclusively beside it, then linked (or, with --force,
        # renamed over a regular file): never written through a planted link.
        outputs.write_with(path, lambda fh: fig.savefig(fh, format=os.path.splitext(path)[1].lower().lstrip(".")),
                           force)
    except outputs.OutputError as exc:
        raise PlotError(f"--plot {exc}") from None
    finally:
        plt.close(fig)
