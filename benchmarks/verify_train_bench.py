"""Does `debtorch verify-train` meet issue 5's targets on this machine?  One run of the
real command (the built-in CNN on the CPU, tuned by debtorch's rules: nothing
hand-picked here) and its JSON document give:

* tuned over baseline samples/s (target >= 1.3x), median of interleaved rounds,
  with the range of same-round ratios;
* the instrumentation's own cost: instrumented against the bare loop, tuned
  settings, same rounds (target <= 2%);
* the compute-only bound of baseline and tuned (batches already in memory) and
  how close each comes to it;
* the data-wait share of step time, baseline and tuned;
* with --max-steps N, time to the workload's target loss and the AMP check.

    python benchmarks/verify_train_bench.py --repeats 7 --doc docs/verify-train.md --json out.json

The machine's load average before and after is printed: on a shared machine
other processes move every number (and 2-thread PyTorch suffers most when
another process holds a core).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- verify-bench:start -->", "<!-- verify-bench:end -->"
TARGET_SPEEDUP = 1.3
TARGET_COST = 0.02


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_verify(args) -> dict:
    cmd = [args.python_debtorch, "-m", "debtorch", "verify-train", "--workload", "builtin:cnn", "--device", "cpu",
           "--json", "--repeats", str(args.repeats), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--max-steps", str(args.max_steps)]
    if args.python:
        cmd += ["--python", args.python]
    if args.plot:
        cmd += ["--plot", args.plot]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                    if os.environ.get("PYTHONPATH") else ""))
    log("running: " + " ".join(cmd[1:]))
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env, cwd=ROOT)
    if res.returncode != 0 or not res.stdout.strip():
        sys.exit(f"verify-train failed (exit {res.returncode})")
    return json.loads(res.stdout)


def fmt_pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def machine_line(doc: dict) -> str:
    f = doc.get("facts") or {}
    cpu, os_, w = f.get("cpu") or {}, f.get("os") or {}, doc.get("worker") or {}
    feats = [k for k in ("avx512_bf16", "amx_bf16") if (cpu.get("features") or {}).get(k)]
    return (f"{cpu.get('model')}, {cpu.get('usable_cpus')} usable CPUs"
            + (f" ({', '.join(feats)})" if feats else "")
            + f", {os_.get('pretty_name') or os_.get('id')}, Python {w.get('python_version')}, torch {w.get('torch')}")


def report(doc: dict, load_before, load_after, seconds: float) -> str:
    s = doc["summary"]
    b, t = s["baseline"], s["tuned"]
    sp, ic, bf = s["speedup"], s["instrumentation"], s["bound_fraction"]
    from debtorch.train.settings import Settings

    tuned = Settings.from_dict(doc["settings"]["tuned"])
    plan = doc["plan"]
    ok_sp = sp.get("ratio") is not None and sp["ratio"] >= TARGET_SPEEDUP
    ok_ic = ic.get("cost") is not None and ic["cost"] <= TARGET_COST
    lines = [
        f"Measured {_dt.date.today().isoformat()} on {machine_line(doc)}; load average "
        f"{load_before:.1f} before, {load_after:.1f} after; {seconds:.0f} s in all.",
        f"`verify-train --workload builtin:cnn --device cpu --repeats {plan['repeats']} --steps {plan['steps']} "
        f"--warmup {plan['warmup']} --max-steps {plan['converge_steps']}`; tuned by "
        f"{(doc.get('config') or {}).get('source', '?')}: `{tuned.short()}`"
        f" (lr_schedule {tuned.lr_schedule}, fused_optimizer {str(tuned.fused_optimizer).lower()}).",
        "",
        "| measure | baseline | tuned | target | met |",
        "|---|---|---|---|---|",
        f"| samples/s, median (min-max) | {b['samples_per_s']:.1f} ({b['samples_per_s_min']:.1f}-"
        f"{b['samples_per_s_max']:.1f}) | {t['samples_per_s']:.1f} ({t['samples_per_s_min']:.1f}-"
        f"{t['samples_per_s_max']:.1f}) | | |",
        f"| speed-up (same-round range) | 1.00x | {sp['ratio']:.2f}x ({sp['low']:.2f}-{sp['high']:.2f}) | "
        f">= {TARGET_SPEEDUP:.1f}x | {'yes' if ok_sp else 'NO'} |",
        f"| instrumentation cost (same-round range) | | {fmt_pct(ic['cost'])} ({fmt_pct(ic['low'])} to "
        f"{fmt_pct(ic['high'])}) | <= {TARGET_COST:.0%} | {'yes' if ok_ic else 'NO'} |",
        f"| data-wait share of step time | {fmt_pct(b['data_wait_share'])} | {fmt_pct(t['data_wait_share'])} | | |",
        f"| compute-only bound, samples/s | {_rate(s['baseline_bound'])} | {_rate(s['tuned_bound'])} | | |",
        f"| share of the bound reached | {fmt_pct(bf['baseline'])} | {fmt_pct(bf['tuned'])} | | |",
    ]
    conv = s.get("convergence")
    if conv:
        from debtorch.verify.analysis import converge_phrase

        lines.append(f"| time to loss {conv['target_loss']:g} | {converge_phrase(conv.get('baseline') or {})} | "
                     f"{converge_phrase(conv.get('tuned') or {})} | | |")
        amp = conv.get("amp")
        if amp:
            lines.append(f"| AMP vs fp32 loss curve | | {'diverged: ' + amp['reason'] if amp.get('diverged') else 'within tolerance'} | | |")
    lines += ["", f"Verdict: {doc['verdict']}"]
    return "\n".join(lines)


def _rate(arm: dict) -> str:
    if not arm.get("samples_per_s"):
        return "-"
    return f"{arm['samples_per_s']:.1f} ({arm['samples_per_s_min']:.1f}-{arm['samples_per_s_max']:.1f})"


def write_doc(path: str, text: str) -> None:
    doc = Path(path).read_text()
    if START not in doc or END not in doc:
        sys.exit(f"{path}: no {START} ... {END} block to replace")
    head, rest = doc.split(START, 1)
    _, tail = rest.split(END, 1)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(f"{head}{START}\n{text}\n{END}{tail}")
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per trial (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=0, help="convergence cap (default 0: speed only)")
    ap.add_argument("--python", help="interpreter that trains (default: the venv's)")
    ap.add_argument("--python-debtorch", default=sys.executable, help=argparse.SUPPRESS)
    ap.add_argument("--plot", help="also write the plot (PNG or SVG)")
    ap.add_argument("--json", help="write the verify-train JSON document here")
    ap.add_argument("--doc", help="replace the measured block in this Markdown file")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    doc = run_verify(args)
    seconds = time.monotonic() - t0
    load_after = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))
    text = report(doc, load_before, load_after, seconds)
    print(text)
    if args.doc:
        write_doc(args.doc, text)
        log(f"wrote the measured block of {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
