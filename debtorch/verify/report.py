"""What verify-train shows: the summary, the table, the JSON document and the plot.

Pure functions of a :class:`~debtorch.verify.measure.Measured` (plus the
config and the facts for the JSON document).  Torch-free; matplotlib is
imported only by :func:`plot` (the ``[plot]`` extra).
"""

from __future__ import annotations

import os
import statistics
from typing import Optional

from debtorch import __version__
from debtorch.lint.hostwaits import report_line
from debtorch.train.runner import scaling_efficiency
from debtorch.verify import analysis
from debtorch.verify.analysis import percent, seconds

SCHEMA_VERSION = 1
PLOT_FORMATS = (".png", ".svg")
CONVERGE_KEYS = ("target_loss", "target_step", "time_to_target_s", "steps", "steps_requested", "warmup_steps",
                 "wall_s", "loss_first", "loss_last", "nonfinite_loss_step", "samples_per_s")


def _converge_view(result: Optional[dict]) -> Optional[dict]:
    if not result:
        return None
    return {k: result.get(k) for k in CONVERGE_KEYS}


def build(m) -> dict:
    """The summary of everything measured in ``m`` (a Measured), JSON-ready."""
    arms = {arm: analysis.summarise(m.trials.get(arm) or []) for arm in analysis.ARMS}
    out = dict(arms)
    out["speedup"] = analysis.speedup(m.trials.get("tuned") or [], m.trials.get("baseline") or [])
    out["instrumentation"] = analysis.instrumentation_cost(m.trials.get("tuned") or [], m.trials.get("tuned_bare") or [])
    out["bound_fraction"] = {"baseline": analysis.bound_fraction(arms["baseline"], arms["baseline_bound"]),
                             "tuned": analysis.bound_fraction(arms["tuned"], arms["tuned_bound"])}
    conv = m.converge or {}
    if conv:
        target = next((c.get("target_loss") for c in conv.values() if c.get("target_loss") is not None), None)
        c = {"target_loss": target, "baseline": _converge_view(conv.get("baseline")),
             "tuned": _converge_view(conv.get("tuned")), "reference": None, "amp": None}
        precision = (m.tuned or {}).get("precision", "fp32")
        ref_name = "reference" if "reference" in conv else "baseline"
        if m.reference is not None and conv.get("tuned") and conv.get(ref_name):
            c["reference"] = ref_name
            c["amp"] = analysis.compare_curves(conv["tuned"], conv[ref_name], precision)
        out["convergence"] = c
    if m.ddp:
        many = statistics.median([r["samples_per_s"] for r in m.ddp if r.get("samples_per_s")] or [0]) or None
        one = arms["tuned"]["samples_per_s"]
        n = m.ddp[0].get("nproc") or 1
        utils = [r.get("gpu_util_mean") for d in m.ddp for r in d.get("ranks") or [] if r.get("gpu_util_mean") is not None]
        out["scaling"] = {
            "nproc": n,
            "backend": m.ddp[0].get("backend"),
            "runs": len(m.ddp),
            "samples_per_s": many,
            "samples_per_s_all": [r.get("samples_per_s") for r in m.ddp],
            "one_process_samples_per_s": one,
            "efficiency": scaling_efficiency({"samples_per_s": many, "nproc": n}, {"samples_per_s": one}),
            "gpu_util": statistics.fmean(utils) if utils else None,
            "one_process_gpu_util": arms["tuned"]["gpu_util"],
        }
    out["disturbed_rounds"] = analysis.disturbed_rounds(m.trials)
    out["interrupted"] = m.interrupted
    out["failed"] = m.failure.line() if m.failure else None
    return out


def to_json(m, summary: dict, verdict: str, exit_code: int, config: Optional[dict] = None,
            facts: Optional[dict] = None) -> dict:
    """The --json document: everything, with the config and the machine's facts."""
    return {
        "schema_version": SCHEMA_VERSION,
        "debtorch_version": __version__,
        "command": "verify-train",
        "exit_code": exit_code,
        "verdict": verdict,
        "summary": summary,
        "plan": m.plan,
        "device": m.device,
        "workload": m.workload,
        "worker": m.worker,
        "settings": {"baseline": m.baseline, "tuned": m.tuned, "reference": m.reference, "ddp": m.ddp_settings},
        "config": config,
        "trials": m.trials,
        "converge": m.converge,
        "ddp": m.ddp,
        "profile": m.profile,
        "failure": m.failure.to_json() if m.failure else None,
        "interrupted": m.interrupted,
        "notes": m.notes,
        "host_waits": m.host_waits,
        "facts": facts,
    }


# ---------------------------------------------------------------------------
# The table


def _rate(arm: dict) -> str:
    if not arm.get("samples_per_s"):
        return "-"
    txt = f"{arm['samples_per_s']:.1f}"
    if arm.get("runs", 0) > 1:
        txt += f" ({arm['samples_per_s_min']:.1f}-{arm['samples_per_s_max']:.1f})"
    return txt


def _bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    from debtorch.render import human_bytes

    return human_bytes(int(n))


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def rows(m, summary: dict) -> list:
    """(label, baseline, tuned) rows of the table."""
    from debtorch.train.settings import Settings

    b, t = summary["baseline"], summary["tuned"]
    sp = summary["speedup"]
    out = []
    if m.baseline and m.tuned:
        try:
            out.append(("settings", Settings.from_dict(m.baseline).short() + " (defaults)",
                        Settings.from_dict(m.tuned).short()))
        except (KeyError, TypeError):
            pass
    out.append(("samples/s (min-max)", _rate(b), _rate(t)))
    ratio = "-"
    if sp.get("ratio"):
        ratio = f"{sp['ratio']:.2f}x" + (f" ({sp['low']:.2f}-{sp['high']:.2f})" if sp.get("low") is not None else "")
    out.append(("speed-up", "1.00x", ratio))
    out.append(("step time (median)", _ms(b.get("step_s")), _ms(t.get("step_s"))))
    out.append(("  waiting for data", f"{_ms(b.get('data_wait_step_s'))} ({percent(b.get('data_wait_share'))})",
                f"{_ms(t.get('data_wait_step_s'))} ({percent(t.get('data_wait_share'))})"))
    out.append(("  computing", _ms(b.get("compute_step_s")), _ms(t.get("compute_step_s"))))
    bf = summary["bound_fraction"]
    out.append(("compute-only bound", _rate(summary["baseline_bound"]), _rate(summary["tuned_bound"])))
    out.append(("  reached", percent(bf.get("baseline")), percent(bf.get("tuned"))))
    out.append(("peak host memory", _bytes(b.get("peak_host_bytes")), _bytes(t.get("peak_host_bytes"))))
    if b.get("peak_device_bytes") is not None or t.get("peak_device_bytes") is not None:
        out.append(("peak device memory", _bytes(b.get("peak_device_bytes")), _bytes(t.get("peak_device_bytes"))))
    if b.get("gpu_util") is not None or t.get("gpu_util") is not None:
        out.append(("GPU utilisation (NVML)", _pct100(b.get("gpu_util")), _pct100(t.get("gpu_util"))))
    conv = summary.get("convergence")
    if conv and conv.get("target_loss") is not None:
        out.append((f"time to loss {conv['target_loss']:g}", analysis.converge_phrase(conv.get("baseline") or {}),
                    analysis.converge_phrase(conv.get("tuned") or {}) if conv.get("tuned") else "-"))
    return out


def _pct100(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0f}%"


def lines(m, summary: dict, warnings: list = ()) -> list:
    """The lines under the table: how the measurement went, what to watch for."""
    out = []
    ic = summary["instrumentation"]
    if ic.get("cost") is not None:
        between = summary["tuned"].get("between_steps_share")
        out.append(f"instrumentation: the per-step clocks and gauges cost {percent(ic['cost'])} of tuned's "
                   f"throughput ({percent(ic['low'])} to {percent(ic['high'])}; instrumented vs bare loop, same rounds)"
                   + (f"; bookkeeping between steps took {percent(between)} of the timed window" if between is not None else ""))
    waits = report_line(m.host_waits)
    if waits:
        out.append(waits)
    bad = summary.get("disturbed_rounds") or []
    if bad:
        out.append(f"noise: in round{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} a trial ran at under half "
                   "its median speed (another process busy?); medians resist this, the ranges include it")
    conv = summary.get("convergence") or {}
    amp = conv.get("amp")
    if amp:
        if amp.get("diverged"):
            out.append(f"AMP: {amp['reason']} (tolerance {amp['tolerance_rel']:.0%}; compared with the "
                       f"fp32 {conv.get('reference')} run on the same batches)")
        elif amp.get("diverged") is None:
            out.append(f"AMP: not judged: {amp['reason']}")
        else:
            gap = amp.get("max_gap_rel")
            out.append(f"AMP: {amp['precision']} loss stays within {amp['tolerance_rel']:.0%} of fp32's over "
                       f"{amp['compared_steps']} steps" + (f" (largest gap {gap:+.1%})" if gap is not None else ""))
    ct = conv.get("tuned")
    if ct and ct.get("target_step") is None and conv.get("target_loss") is not None:
        out.append(f"convergence: tuned did not reach loss {conv['target_loss']:g} within "
                   f"{(ct.get('warmup_steps') or 0) + (ct.get('steps') or 0)} steps (last loss "
                   f"{ct.get('loss_last') or float('nan'):.3g}); raise --max-steps or set --target-loss")
    sc = summary.get("scaling")
    if sc:
        eff = f"{sc['efficiency']:.0%}" if sc.get("efficiency") is not None else "-"
        one = f"{sc['one_process_samples_per_s']:.1f}" if sc.get("one_process_samples_per_s") else "-"
        many = f"{sc['samples_per_s']:.1f}" if sc.get("samples_per_s") else "-"
        line = (f"{sc['nproc']} processes ({sc.get('backend')}): {many} samples/s vs {one} in one process: "
                f"scaling efficiency {eff}")
        if sc.get("gpu_util") is not None:
            line += f"; GPU utilisation {_pct100(sc.get('one_process_gpu_util'))} -> {_pct100(sc['gpu_util'])}"
        out.append(line)
    t = summary["tuned"]
    if (m.device or "").startswith("cuda") and t.get("runs") and t.get("gpu_util") is None:
        out.append("GPU utilisation: NVML gave no samples (nvidia-ml-py missing in the target environment, "
                   "or NVML does not report utilisation for this GPU)")
    if m.profile and m.profile.get("trace"):
        out.append(f"profile: {m.profile['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    notes = sorted(set(summary["tuned"].get("notes", []) + summary["baseline"].get("notes", []) + list(m.notes)))
    for note in notes:
        out.append(f"note: {note}")
    for w in warnings:
        out.append(f"warning: {w}")
    if m.failure:
        f = m.failure
        out.append(f"FAILED: {f.line()}" + (f" [{f.finding}]" if f.finding else ""))
        if f.fix:
            out.append(f"  fix: {f.fix}")
    return out


def render(m, summary: dict, verdict: str, warnings: list = (), console=None) -> None:
    """Print the table, the lines under it and the verdict (stdout unless ``console`` says)."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:  # a log or a pipe: no terminal width to respect
            console = Console(highlight=False, width=110)
    device = m.device or "-"
    wl = (m.workload or {}).get("name") or (m.plan or {}).get("workload") or "-"
    table = Table(title=f"verify-train: {wl} on {device}", title_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("tuned", justify="right")
    for label, a, b in rows(m, summary):
        table.add_row(label, a, b)
    console.print(table)
    for line in lines(m, summary, warnings):
        console.print(line, markup=False, soft_wrap=True)
    console.print(("verdict: " + verdict) if verdict else "verdict: nothing measured", markup=False, soft_wrap=True)


# ---------------------------------------------------------------------------
# The plot


class PlotError(Exception):
    """--plot cannot be written; one line."""


def check_plot_path(path: str, force: bool = False) -> None:
    """Refuse a bad --plot early (before minutes of measuring); an existing file only with ``force``."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in PLOT_FORMATS:
        raise PlotError(f"--plot {path}: the file name must end in .png or .svg")
    if os.path.isdir(path):
        raise PlotError(f"--plot {path}: is a directory")
    if os.path.lexists(path) and not force:
        raise PlotError(f"--plot {path}: exists; use --force to replace it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise PlotError(f"--plot {path}: directory {directory} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'debtorch[plot]' "
                        "(or apt install python3-matplotlib)") from None


def plot(m, summary: dict, path: str) -> None:
    """Throughput (with spread and the compute-only bounds), the step-time breakdown and the loss curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = m.converge or {}
    panels = 3 if conv else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.0))
    names = ["baseline", "tuned"]
    arms = [summary["baseline"], summary["tuned"]]
    bounds = [summary["baseline_bound"], summary["tuned_bound"]]
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
        ax.scatter(bx, by, marker="_", s=900, color="black", label="compute-only bound", zorder=3)
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
            r = conv.get(name)
            if r:
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
    fig.suptitle(f"debtorch verify-train: {(m.workload or {}).get('name')} on {m.device}", fontsize=10)
    fig.tight_layout()
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp")
    try:
        fig.savefig(tmp, format=os.path.splitext(path)[1].lower().lstrip("."))
        os.replace(tmp, path)
    except OSError as exc:
        raise PlotError(f"--plot {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
