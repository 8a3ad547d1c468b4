"""Issue 29's loop closed on `builtin:images` and a simulated accelerator, and the data read check against
`fio`.  Three parts, each a subcommand (`all` runs them in turn):

* `calibrated`: one loader process's rate here (no workers, one thread, against a device far faster:
  tune_bench's measure), the device at `--factor` times it; then `tune --workload` (the rules calibrated:
  its calibration's seconds), `tune --measure --budget`, and fresh interleaved rounds of PyTorch's defaults,
  the plain rules, the calibrated rules and `--measure`'s pick in one worker; then `verify-train` with its
  default tuned settings (no `--config`).  Targets: calibration <= 15 s; the calibrated pick's share of
  `--measure`'s, over the paired rounds, with its interval's lower end >= 97%; verify-train's speed-up
  interval above 1.
* `watch`: a user's loop (benchmarks/pipeline_loop.py) watched at 0 workers and at 1 (too few), `tune
  --from-watch` on each record, the loop again with the prescription, watched: the data wait predicted
  against the one measured (target: within 10 points), the simulated device's idle share beside
  the model's `1 - supplied / consumed`, and the CPU contention a queued batch's hand-over meets: the
  CPUs the model expects the workers to keep busy against those measured (and the other processes'),
  its hand-over against the median fetch.  A start tests the model only where
  the prediction and the measurement are not both near 100% (a host clock waits nearly all the time
  whenever the loop is input-bound): the report counts those starts.  The 1.2x device gives two of them
  on a quiet 2-CPU machine (two workers feed it); where other processes hold a CPU, two workers cannot,
  every start reads near 100%, and `--watch-factors` should name devices the CPUs left can feed.
* `dataread`: a folder of `--files` small files on a disk (created once), `dataread.measure` (what `doctor
  --measure-data` runs) against `fio` reading the same files the same way (whole files, psync, the cache
  dropped first, the same number of readers), interleaved `--rounds` times: MB/s and files/s at 1 and N
  readers, each ratio (target: within 20%); then a throttled reader (a test double holding reads to
  `--throttle` MB/s) against the loader's need (a finding, storage.W004) and the same folder on tmpfs
  (none).

    python benchmarks/pipeline_bench.py all --json pipeline.json > pipeline.md      # 25-35 min, quiet 2 CPUs
    python benchmarks/pipeline_bench.py calibrated --budget 60 --rounds 3 --quiet 1 --max-wait 0   # a smoke run

The load average before and after each part is printed: on a shared machine every rate moves with it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))     # the throttled reader (a test double)

from tune_bench import Gated, Quiet, loader_rate, log  # noqa: E402

from debtorch import facts as facts_mod  # noqa: E402
from debtorch import stats  # noqa: E402
from debtorch.cli.shared import parse_device  # noqa: E402
from debtorch.doctor import Context, diagnose  # noqa: E402
from debtorch.facts import dataread  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.device import Device  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune import rules  # noqa: E402
from debtorch.tune.measure import EngineTrials, Trialer  # noqa: E402

WORKLOAD = "builtin:images"


def run_json(args: argparse.Namespace, *argv: str, timeout: float = 3600) -> tuple:
    """``python -m debtorch ARGV`` as a user runs it: (its JSON document, seconds, stderr's tail)."""
    t0 = time.monotonic()
    got = subprocess.run([args.python, "-m", "debtorch", *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    took = time.monotonic() - t0
    if got.returncode not in (0, 1):
        raise SystemExit(f"debtorch {' '.join(argv)}: exit {got.returncode}: {got.stderr.strip()[-500:]}")
    return json.loads(got.stdout), took, got.stderr.strip().splitlines()[-3:]


def load_line() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def machine(args: argparse.Namespace) -> str:
    host = LiveHost()
    f = facts_mod.collect(host, facts_mod.Options(python=args.python, sections=("os", "cpu", "memory", "python")))
    host.close()
    return (f"{facts_mod.get(f, 'cpu.model')}, {facts_mod.get(f, 'cpu.usable_cpus')} usable CPUs, "
            f"{(facts_mod.get(f, 'memory.total') or 0) / 2**30:.0f} GiB, {facts_mod.get(f, 'os.pretty_name')}, "
            f"PyTorch {facts_mod.get(f, 'python.torch.version')}")


def _ratio(a: list, b: list, margin: float = 0.0) -> dict:
    est = stats.compare(a, b, margin=margin)
    return {"ratio": est.estimate, "low": est.low, "high": est.high, "verdict": est.verdict}


def _fmt_ratio(r: Optional[dict]) -> str:
    if not r or r.get("ratio") is None:
        return "-"
    return f"{r['ratio']:.3f} ({r['low']:.3f}-{r['high']:.3f})"


# ---------------------------------------------------------------------------- calibrated


def rate_here(args: argparse.Namespace, quiet: Quiet) -> float:
    """One loader process's samples/s of builtin:images here (tune_bench's measure)."""
    ns = SimpleNamespace(python=args.python, small=False, budget=120.0)
    return loader_rate(ns, quiet, WORKLOAD)


def calibrated(args: argparse.Namespace, out: Path, quiet: Quiet) -> dict:
    before = load_line()
    one = args.loader_rate or rate_here(args, quiet)
    spec = str(parse_device(f"sim:{args.factor * one:.0f}"))
    log(f"one loader process: {one:.1f} samples/s; the device: {spec}")
    cal_doc, cal_s, _ = run_json(args, "tune", "--workload", WORKLOAD, "--device", spec, "--json",
                                 "--write", str(out / "calibrated.toml"), "--force")
    log(f"calibrated: {cal_doc['settings']['num_workers']} workers in {cal_s:.1f} s "
        f"(calibration {cal_doc['calibration']['seconds']:.1f} s)")
    meas_doc, meas_s, _ = run_json(args, "tune", "--measure", "--workload", WORKLOAD, "--device", spec,
                                   "--budget", str(args.budget), "--json", "--write", str(out / "measured.toml"),
                                   "--force")
    log(f"--measure: {Settings.from_dict(meas_doc['settings']).short()} in {meas_s:.0f} s")
    plain = rules.recommend(facts_mod.collect(LiveHost(), facts_mod.Options(python=args.python,
                                                                            sections=("cpu", "memory", "python"))),
                            rules.Request(device=Device.parse(spec)))
    contestants = {"PyTorch defaults": Settings(), "rules": plain.settings,
                   "calibrated rules": _one(cal_doc), "--measure": _one(meas_doc)}
    values = rounds(args, spec, quiet, contestants)
    vt_doc, vt_s, _ = run_json(args, "verify-train", "--workload", WORKLOAD, "--device", spec, "--json",
                               "--budget", str(args.verify_budget))
    summary = vt_doc.get("summary") or {}
    return {
        "load_before": before, "load_after": load_line(), "one_loader": one, "device": spec,
        "calibrated": {"settings": _one(cal_doc).short(), "command_s": cal_s,
                       "calibration": cal_doc["calibration"], "reasons": cal_doc["reasons"]},
        "measured": {"settings": _one(meas_doc).short(), "command_s": meas_s},
        "rounds": {name: v for name, v in values.items()},
        "settings": {name: s.short() for name, s in contestants.items()},
        "medians": {name: statistics.median(v) for name, v in values.items() if v},
        "calibrated_of_measured": _ratio(values["calibrated rules"], values["--measure"], margin=0.03),
        "calibrated_over_defaults": _ratio(values["calibrated rules"], values["PyTorch defaults"]),
        "verify_train": {"seconds": vt_s, "tuned": _short((vt_doc.get("settings") or {}).get("tuned")),
                         "speedup": summary.get("speedup"), "calibration": (vt_doc.get("config") or {}).get(
                             "calibration"), "verdict": vt_doc.get("verdict")},
    }


def _short(settings: Optional[dict]) -> Optional[str]:
    return Settings.from_dict(settings).short() if settings else None


def _one(doc: dict) -> Settings:
    return Settings.from_dict(doc["settings"]).replace(nproc=1, backend=None)


def rounds(args: argparse.Namespace, spec: str, quiet: Quiet, contestants: dict) -> dict:
    """Fresh interleaved rounds in one worker, the order rotating and reversed every other round.  Contestants
    with the same settings share one measurement a round (tune_bench's head_to_head does the same): one
    configuration under two names must not read as two speeds."""
    groups: dict = {}
    for name, s in contestants.items():
        groups.setdefault(s.short(), []).append(name)
    engine = EngineTrials(WORKLOAD, Device.parse(spec), args.python)
    values: dict = {name: [] for name in contestants}
    try:
        trialer = Trialer(Gated(engine, quiet), clock=quiet.clock)
        trialer.calibrate(Settings(threads=1), 120.0)
        keys = list(groups)
        for r in range(args.rounds):
            k = r % len(keys)
            order = keys[k:] + keys[:k]
            for key in (order if r % 2 == 0 else order[::-1]):
                got = trialer(contestants[groups[key][0]])
                for name in groups[key]:
                    values[name].append(got.samples_per_s)
                log(f"round {r + 1}/{args.rounds}: {' = '.join(groups[key])} ({key}): {got.samples_per_s}")
    finally:
        engine.close()
    return {n: [v for v in vals if v] for n, vals in values.items()}


# ---------------------------------------------------------------------------- watch


def watch(args: argparse.Namespace, out: Path, quiet: Quiet) -> dict:
    before = load_line()
    one = args.loader_rate or rate_here(args, quiet)
    results = []
    for factor in (float(x) for x in args.watch_factors.split(",")):
        spec = str(parse_device(f"sim:{factor * one:.0f}"))
        for start in (0, 1):
            results.append(watch_once(args, out, quiet, spec, factor, start))
    return {"load_before": before, "load_after": load_line(), "one_loader": one, "runs": results}


def watch_once(args: argparse.Namespace, out: Path, quiet: Quiet, spec: str, factor: float, start: int) -> dict:
    """One start: watched, prescribed, watched again."""
    tag = f"x{factor:g}-w{start}"
    first, again = out / f"watch-{tag}.jsonl", out / f"watch-{tag}-again.jsonl"
    for p in (first, again):
        p.unlink(missing_ok=True)
    quiet.wait()
    loop(args, spec, ["--workers", str(start)], first, out / f"device-{tag}.json")
    doc, _, _ = run_json(args, "tune", "--from-watch", str(first), "--device", spec, "--json", "--write",
                         str(out / f"prescribed-{tag}.toml"), "--force")
    quiet.wait()
    loop(args, spec, ["--config", str(out / f"prescribed-{tag}.toml")], again, out / f"device-{tag}-again.json")
    measured = json.loads(again.read_text().splitlines()[-1])
    before_rec = json.loads(first.read_text().splitlines()[-1])
    device = json.loads((out / f"device-{tag}-again.json").read_text())
    p = doc.get("prescription") or {}
    predicted_idle = None
    if p:   # the device's idle share the model implies: 1 - supplied / consumed
        predicted_idle = max(0.0, 1.0 - min(p["supplied"], p["consumed"]) / p["consumed"])
    result = {
        "device": spec, "factor": factor, "start_workers": start, "before": before_rec["data_wait"],
        "prescribed": doc["settings"],
        "reason": doc["reasons"]["num_workers"], "notes": doc["notes"], "prescription": p,
        "predicted_wait": p.get("predicted_wait"), "measured_wait": measured["data_wait"],
        "within_10_points": (p.get("predicted_wait") is not None and
                             abs(p["predicted_wait"] - measured["data_wait"]["share"]) <= 0.10),
        "device_idle_predicted": predicted_idle, "device_idle_measured": device.get("idle_share"),
        "samples_per_s": measured.get("samples_per_s"),
        # the contention term: a queued batch's hand-over on CPUs the workers and other processes keep busy
        "handover_predicted_s": p.get("handover_s"), "workers_cpus_predicted": p.get("workers_cpus"),
        "fetch_s_measured": measured["pipeline"]["fetch_s"], "cpus_measured": measured["pipeline"]["cpus"],
        "informative": informative(p.get("predicted_wait"), measured["data_wait"]["share"]),
    }
    log(f"{tag}: predicted {p.get('predicted_wait')}, measured {measured['data_wait']['share']:.3f}")
    return result


INFORMATIVE = 0.9   # a host clock near 100% agrees with any prediction near 100%: such a start tests little


def informative(predicted: Optional[float], measured: float) -> bool:
    """Whether a start tests the model: its prediction and its measurement not both near 100%."""
    return predicted is not None and not (predicted >= INFORMATIVE and measured >= INFORMATIVE)


def loop(args: argparse.Namespace, spec: str, extra: list, json_path: Path, device_json: Path) -> None:
    cmd = [args.python, str(ROOT / "benchmarks" / "pipeline_loop.py"), "--device", spec, "--steps", str(args.steps),
           "--json", str(json_path), "--device-json", str(device_json), *extra]
    got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if got.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {got.stderr.strip()[-500:]}")


# ---------------------------------------------------------------------------- dataread


def make_folder(path: Path, files: int, seed: int = 0) -> Path:
    """``files`` files of 4-64 KiB, whole 4 KiB blocks (fio reads 4 KiB blocks to their end), in 10
    sub-folders (made once; random bytes: nothing compresses)."""
    have = list(path.rglob("*.bin")) if path.is_dir() else []
    if len(have) == files and all(p.stat().st_size % 4096 == 0 for p in have):
        return path
    shutil.rmtree(path, ignore_errors=True)
    rng = random.Random(seed)
    for i in range(files):
        sub = path / f"part{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"s{i:06d}.bin").write_bytes(os.urandom(rng.randint(1, 16) * 4096))
    os.sync()
    return path


def halves(path: Path) -> tuple:
    """The sample dataread.measure reads, split as it splits it: (the one reader's, the parallel readers')."""
    files = dataread.list_files(LiveHost(), str(path))
    sample = list(files)
    random.Random(0).shuffle(sample)
    sample = sample[:dataread.SAMPLE_FILES]
    half = max(1, len(sample) // 2)
    return [p for p, _ in sample[:half]], [p for p, _ in sample[half:]]


def fio(paths: list, readers: int, work: Path) -> dict:
    """fio reading ``paths`` whole, one after another per job, ``readers`` jobs sharing them: MB/s and files/s.
    Each job reads a folder of hard links to its share (``opendir``: fio's job lines cannot hold a thousand
    names; a hard link is the same file, its blocks and its cache)."""
    links = work / f"fio-{readers}"
    shutil.rmtree(links, ignore_errors=True)
    # 4 KiB reads (fio skips what is shorter than a block: the files are whole blocks); files per second
    # are the files over the run time, every byte of every file read (checked)
    lines = ["[global]", "rw=read", "bs=4k", "ioengine=psync", "invalidate=1", "file_service_type=sequential",
             "thread", "group_reporting"]
    try:
        for j in range(readers):
            folder = links / f"reader{j}"
            folder.mkdir(parents=True)
            for i, p in enumerate(paths[j::readers]):
                os.link(p, folder / f"{i:06d}.bin")
            lines += [f"[reader{j}]", f"opendir={folder}"]
        job = links / "read.fio"
        job.write_text("\n".join(lines) + "\n")
        got = subprocess.run(["fio", "--output-format=json", str(job)], capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(links, ignore_errors=True)
    if got.returncode != 0:
        raise SystemExit(f"fio: {got.stderr.strip()[-300:]}")
    read = json.loads(got.stdout[got.stdout.index("{"):])["jobs"][0]["read"]   # after fio's notes
    seconds = read["runtime"] / 1000.0
    total = sum(os.path.getsize(p) for p in paths)
    if read["io_bytes"] != total:
        raise SystemExit(f"fio read {read['io_bytes']} bytes of {total}: not the same reads")
    return {"mb_per_s": total / 1e6 / seconds if seconds else 0.0,
            "files_per_s": len(paths) / seconds if seconds else 0.0, "seconds": seconds, "files": len(paths)}


def data_read(args: argparse.Namespace, out: Path) -> dict:
    before = load_line()
    folder = make_folder(Path(args.dir), args.files)
    one_half, many_half = halves(folder)
    readers = dataread.default_readers(len(os.sched_getaffinity(0)))
    ours: dict = {"one": [], "many": []}
    theirs: dict = {"one": [], "many": []}
    have_fio = shutil.which("fio") is not None
    for r in range(args.rounds):
        got = dataread.measure(LiveHost(), str(folder), readers, seconds=args.read_seconds)
        ours["one"].append(got.one.to_json())
        ours["many"].append(got.many.to_json())
        log(f"dataread round {r + 1}: ours 1: {got.one.mb_per_s:.1f} MB/s {got.one.files_per_s:.0f} files/s; "
            f"{readers}: {got.many.mb_per_s:.1f} MB/s {got.many.files_per_s:.0f} files/s")
        if have_fio:
            # the files our pass reached, in its order: the same reads
            work = folder.parent / f"{folder.name}-fio"   # on the data's filesystem: hard links
            theirs["one"].append(fio(one_half[:max(1, got.one.files)], 1, work))
            theirs["many"].append(fio(many_half[:max(readers, got.many.files)], readers, work))
            log(f"dataread round {r + 1}: fio 1: {theirs['one'][-1]}; {readers}: {theirs['many'][-1]}")
    compare = {}
    for which in ("one", "many"):
        for unit in ("mb_per_s", "files_per_s"):
            a = [x[unit] for x in ours[which]]
            b = [x[unit] for x in theirs[which]]
            ratio = statistics.median(a) / statistics.median(b) if a and b and statistics.median(b) else None
            compare[f"{which}.{unit}"] = {"ours": statistics.median(a) if a else None,
                                          "fio": statistics.median(b) if b else None, "ratio": ratio,
                                          "within_20pct": ratio is not None and 0.8 <= ratio <= 1.2}
    return {"load_before": before, "load_after": load_line(), "folder": str(folder), "files": args.files,
            "readers": readers, "ours": ours, "fio": theirs, "compare": compare, "fio_found": have_fio,
            "throttled": throttled(args, folder)}


def throttled(args: argparse.Namespace, folder: Path) -> dict:
    """A throttled reader (a test double) and tmpfs, judged against the same need."""
    from throttle import ThrottledHost

    out = {}
    shm = Path(tempfile.mkdtemp(prefix="debtorch-bench-", dir="/dev/shm")) if os.path.isdir("/dev/shm") else None
    try:
        cases = [("throttled", ThrottledHost(args.throttle), folder)]
        if shm is not None:
            shutil.copytree(folder, shm / "data")
            cases.append(("tmpfs", LiveHost(), shm / "data"))
        for name, host, root in cases:
            opts = facts_mod.Options(data=str(root), measure_data=True, data_rate=args.need,
                                     data_seconds=args.read_seconds, sections=("cpu", "memory", "storage"))
            doc = facts_mod.collect(host, opts)
            found = [f for f in diagnose(doc, Context(source="live")).findings if f.id.startswith("storage.")]
            read = doc["storage"]["data"].get("read") or {}
            out[name] = {"fstype": doc["storage"]["data"].get("fstype"), "samples_per_s": read.get("samples_per_s"),
                         "best_mb_per_s": read.get("best_mb_per_s"), "need": args.need,
                         "findings": [f"{f.id} {f.message}" for f in found]}
            log(f"{name}: {out[name]}")
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------- the report


def render(machine_text: str, results: dict) -> str:
    lines = [f"# The input pipeline, measured ({time.strftime('%Y-%m-%d')})", "",
             f"Machine: {machine_text}.", ""]
    c = results.get("calibrated")
    if c:
        med = c["medians"]
        cal = c["calibrated"]["calibration"]
        lines += ["## Calibrated rules against `--measure` and PyTorch's defaults", "",
                  f"Load average {c['load_before']} before, {c['load_after']} after. One loader process: "
                  f"{c['one_loader']:.1f} samples/s; the device: `{c['device']}`.", "",
                  "| contestant | settings | median samples/s |", "|---|---|---:|"]
        for name, v in med.items():
            lines.append(f"| {name} | `{c['settings'][name]}` | {v:.1f} |")
        vt = c["verify_train"]
        sp = vt.get("speedup") or {}
        speedup = "-"
        if sp.get("ratio") is not None:
            speedup = f"{sp['ratio']:.2f}x ({sp['low']:.2f}-{sp['high']:.2f})"
        share = c["calibrated_of_measured"]
        same = c["calibrated"]["settings"] == c["measured"]["settings"]
        lines += ["", "| target | measured | met |", "|---|---|---|",
                  f"| calibration at most 15 s | {cal['seconds']:.1f} s (the command {c['calibrated']['command_s']:.1f} s) "
                  f"| {'yes' if cal['seconds'] <= 15 else 'NO'} |",
                  f"| calibrated within 3% of `--measure` (paired rounds) | "
                  f"{'the same settings' if same else _fmt_ratio(share)} | "
                  f"{'yes' if same or (share.get('low') or 0) >= 0.97 else 'unresolved or NO'} |",
                  f"| verify-train, default tuned settings, faster than PyTorch's defaults | {speedup}, "
                  f"tuned `{vt.get('tuned')}` | {'yes' if (sp.get('low') or 0) > 1 else 'NO'} |",
                  "", f"verify-train's verdict: {vt.get('verdict')}", "",
                  f"The calibrated reason: {c['calibrated']['reasons'].get('num_workers', {}).get('text')}", ""]
    w = results.get("watch")
    if w:
        lines += ["## watch -> --from-watch -> watch again", "",
                  f"Load average {w['load_before']} before, {w['load_after']} after.", "",
                  "| device | start | data wait before | prescribed | predicted | measured after (95%) | within 10 points | "
                  "device idle: model, measured | workers' CPUs: model, measured | others' CPUs | hand-over: model, median fetch |",
                  "|---|---|---:|---|---:|---:|---|---|---|---:|---|"]
        for r in w["runs"]:
            m = r["measured_wait"]
            lines.append(f"| {r['factor']:g}x (`{r['device'].split(',')[0]}`) | {r['start_workers']} worker(s) | {r['before']['share']:.0%} | "
                         f"w{r['prescribed']['num_workers']} pf{r['prescribed']['prefetch_factor']} | "
                         f"{(r['predicted_wait'] or 0):.0%} | {m['share']:.0%} ({m['low'] or 0:.0%}-{m['high'] or 0:.0%}) | "
                         f"{'yes' if r['within_10_points'] else 'NO'} | "
                         f"{(r['device_idle_predicted'] or 0):.0%}, {(r['device_idle_measured'] or 0):.0%} | "
                         f"{_workers_cpus(r)} | {_others(r)} | {_handover(r)} |")
        told = [r for r in w["runs"] if r.get("informative")]
        lines += ["", f"Informative starts (prediction and measurement not both at {INFORMATIVE:.0%} or more): "
                  f"{len(told)} of {len(w['runs'])}, within 10 points: {sum(1 for r in told if r['within_10_points'])}.",
                  ""]
        for r in w["runs"]:
            lines.append(f"- {r['factor']:g}x, from {r['start_workers']} worker(s): {r['reason']['rule']}: "
                         f"{r['reason']['text']}")
        lines.append("")
    d = results.get("dataread")
    if d:
        lines += ["## The data read check against fio", "",
                  f"Load average {d['load_before']} before, {d['load_after']} after; {d['files']} files in "
                  f"`{d['folder']}`, {d['readers']} parallel readers, medians of {len(d['ours']['one'])} "
                  "interleaved rounds.", "",
                  "| figure | debtorch | fio | ratio | within 20% |", "|---|---:|---:|---:|---|"]
        for k, v in d["compare"].items():
            ratio = f"{v['ratio']:.2f}" if v["ratio"] is not None else "-"
            lines.append(f"| {k} | {v['ours'] or 0:.1f} | {v['fio'] or 0:.1f} | {ratio} | "
                         f"{'yes' if v['within_20pct'] else 'NO'} |")
        lines += ["", "| reader | fstype | feeds samples/s | need | storage findings |", "|---|---|---:|---:|---|"]
        for name, t in d["throttled"].items():
            lines.append(f"| {name} | {t['fstype']} | {t['samples_per_s'] or 0:.0f} | {t['need']:.0f} | "
                         f"{'; '.join(t['findings']) or 'none'} |")
        lines.append("")
    return "\n".join(lines)


def _workers_cpus(r: dict) -> str:
    """The CPUs the model expects the workers to keep busy (decoding at the rate consumed), and what the watch
    after the prescription measured."""
    model = r.get("workers_cpus_predicted")
    measured = (r.get("cpus_measured") or {}).get("workers_busy")
    return f"{'-' if model is None else f'{model:.2f}'}, {'-' if measured is None else f'{measured:.2f}'}"


def _others(r: dict) -> str:
    """The CPUs other processes used during the watch after the prescription (the machine's less the job's)."""
    cpus = r.get("cpus_measured") or {}
    if cpus.get("machine_busy") is None:
        return "-"
    return f"{cpus['machine_busy'] - (cpus.get('main_busy') or 0.0) - (cpus.get('workers_busy') or 0.0):.2f}"


def _handover(r: dict) -> str:
    """The model's hand-over of a queued batch against the median fetch measured after the prescription."""
    model = r.get("handover_predicted_s")
    fetch = (r.get("fetch_s_measured") or {}).get("median")
    return f"{'-' if model is None else f'{1e3 * model:.1f} ms'}, {'-' if fetch is None else f'{1e3 * fetch:.1f} ms'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("calibrated", "watch", "dataread", "all"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default="pipeline-bench-out", help="folder for configs and watch files")
    ap.add_argument("--factor", type=float, default=2.0, help="the device at this many times one loader's rate")
    ap.add_argument("--loader-rate", type=float, help="one loader process's samples/s (skips measuring it)")
    ap.add_argument("--budget", type=float, default=150.0, help="tune --measure's budget")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds of the head-to-head (and dataread)")
    ap.add_argument("--verify-budget", type=float, default=300.0, help="verify-train's budget")
    ap.add_argument("--steps", type=int, default=200, help="batches of each watched loop")
    ap.add_argument("--watch-factors", default="1.2,2", help="the watched loop's devices, times one loader's rate: "
                    "one the prescription can feed, one it cannot (on 2 CPUs)")
    ap.add_argument("--dir", default="/var/tmp/debtorch-pipeline-files", help="the small files' folder (on a disk)")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--read-seconds", type=float, default=20.0)
    ap.add_argument("--throttle", type=float, default=2.0, help="the throttled reader's MB/s")
    ap.add_argument("--need", type=float, default=500.0, help="samples/s the loader needs (one file a sample)")
    ap.add_argument("--quiet", type=float, default=0.25, help="tune_bench's gate: start a trial when the CPUs are "
                    "at most this busy with other work (1: never wait)")
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    quiet = Quiet(threshold=args.quiet, max_wait=args.max_wait)
    text = machine(args)
    log(f"machine: {text}; load average {load_line()}")
    results: dict[str, Any] = {}
    if args.part in ("calibrated", "all"):
        results["calibrated"] = calibrated(args, out, quiet)
        args.loader_rate = args.loader_rate or results["calibrated"]["one_loader"]
    if args.part in ("watch", "all"):
        results["watch"] = watch(args, out, quiet)
    if args.part in ("dataread", "all"):
        results["dataread"] = data_read(args, out)
    print(render(text, results))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": text, "args": vars(args), **results}, indent=1,
                                              default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
