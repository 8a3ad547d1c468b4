"""verify-train without torch: the numbers, the words, failures as findings, the plan, bad usage."""

import dataclasses
import math
import re

import pytest
from clitools import cli_runner
from typer.testing import CliRunner

from debtorch import stats
from debtorch.cli import app
from debtorch.report import plot as plot_report
from debtorch.report import verify as report
from debtorch.report.console import texts
from debtorch.train.device import CPU, Device
from debtorch.train.result import DistributedResult, LoadedWorkload, TrialResult
from debtorch.train.settings import Settings
from debtorch.transport.client import WorkerError
from debtorch.verify import analysis
from debtorch.verify.failures import Failure, Fit, from_worker_error, oom_message, shm_finding
from debtorch.verify.measure import ConvergeRuns, JobKind, Measured, Plan, Verifier
from debtorch.verify.results import HostWaits
from debtorch.verify.run import TunedBy

runner = CliRunner()
MiB = 1024 * 1024


def trial(sps, wait=0.1, losses=(), **kw):
    return TrialResult.from_json(dict({"samples_per_s": sps, "data_wait_share": wait,
                                       "step_median_s": 1.0 / sps if sps else None, "losses": list(losses),
                                       "warmup_losses": []}, **kw))


def curve(**kw):
    """A convergence run's result: its losses, its target and when it reached it."""
    return TrialResult.from_json(dict({"warmup_losses": []}, **kw))


# ---------------------------------------------------------------- numbers


def test_speedup_is_a_ratio_of_medians_with_an_interval_from_the_paired_rounds():
    base = [trial(100), trial(80), trial(120)]
    tuned = [trial(150), trial(160), trial(180)]
    sp = analysis.speedup(tuned, base)
    assert sp.value == pytest.approx(160 / 100)
    # Rounds pair up: 150/100, 160/80, 180/120, every one above 1: a verdict, and an interval
    # at least as wide as the same-round ratios (three rounds are few).
    assert sp.low <= 1.5 and sp.high >= 2.0 and sp.low > 1
    assert sp.verdict == "faster" and sp.rounds == 3
    assert sp.pairs == pytest.approx([1.5, 2.0, 1.5])


def test_failed_trials_do_not_enter_the_median():
    s = analysis.summarise([trial(100), trial(None), trial(300), trial(200)])
    assert s.runs == 3 and s.samples_per_s == 200
    assert s.samples_per_s_min == 100 and s.samples_per_s_max == 300


def test_instrumentation_cost_pairs_instrumented_and_bare_trials_of_a_round():
    cost = analysis.instrumentation_cost([trial(98), trial(99), trial(101)], [trial(100), trial(100), trial(100)])
    assert cost.value == pytest.approx(0.01)
    assert cost.low <= -0.01 and cost.high >= 0.02     # the interval holds every round's cost
    assert cost.verdict == "inconclusive" and cost.more_rounds >= 1
    steady = analysis.instrumentation_cost([trial(99.5)] * 4, [trial(100)] * 4)
    assert steady.verdict == "negligible"                  # below 2% beyond noise


def _curve(n, start=2.0, end=1.0):
    return [start + (end - start) * i / (n - 1) for i in range(n)]


def test_amp_following_fp32_is_not_a_divergence():
    ref = curve(losses=_curve(40))
    amp = curve(losses=[x * 1.03 for x in _curve(40)])
    out = analysis.compare_curves(amp, ref, "bf16")
    assert out.diverged is False and out.compared_steps == 40
    assert out.max_gap_rel == pytest.approx(0.03)


def test_amp_drifting_above_fp32_in_the_second_half_is_a_divergence():
    base = _curve(40)
    amp = base[:20] + [x * 1.25 for x in base[20:]]
    out = analysis.compare_curves(curve(losses=amp), curve(losses=base), "fp16")
    assert out.diverged is True and "fp16 loss" in out.reason and out.step > 20


def test_an_early_wobble_is_not_a_divergence():
    base = _curve(40)
    amp = [x * 1.3 if i < 10 else x for i, x in enumerate(base)]
    assert analysis.compare_curves(curve(losses=amp), curve(losses=base)).diverged is False


def test_a_non_finite_amp_loss_is_a_divergence():
    base = _curve(30)
    amp = base[:12] + [math.inf] + base[13:]
    out = analysis.compare_curves(curve(losses=amp), curve(losses=base), "fp16")
    assert out.diverged is True and out.step == 13 and "non-finite" in out.reason


def test_amp_needing_many_more_steps_to_the_target_is_a_divergence():
    base = _curve(60)
    out = analysis.compare_curves(curve(losses=base, target_step=60), curve(losses=base[:30], target_step=30))
    assert out.diverged is True and "60 steps" in out.reason


def test_too_short_a_curve_is_not_judged():
    assert analysis.compare_curves(curve(losses=[1, 1, 1]), curve(losses=[1, 1, 1])).diverged is None


def test_same_numerics_looks_at_batch_and_schedule_only():
    a = Settings(precision="fp32")
    assert analysis.same_numerics(a, Settings(num_workers=4, threads=1, channels_last=True), 32)
    assert analysis.same_numerics(a, Settings(micro_batch=32), 32)
    assert not analysis.same_numerics(a, Settings(micro_batch=16, accumulation_steps=2), 32)
    assert not analysis.same_numerics(a, Settings(lr_schedule="onecycle"), 32)


def _measured(base_sps, tuned_sps, converge=None, tuned_settings=None):
    m = Measured()
    m.baseline = Settings()
    m.tuned = tuned_settings or Settings(precision="bf16")
    m.trials["baseline"] = [trial(x, wait=0.3) for x in base_sps]
    m.trials["tuned"] = [trial(x, wait=0.02) for x in tuned_sps]
    m.trials["tuned_bare"] = [trial(x * 1.005) for x in tuned_sps]
    if converge:
        m.converge = ConvergeRuns(**{name: curve(**run) for name, run in converge.items()})
    return m


def test_the_verdict_names_speedup_data_wait_and_time_to_target():
    conv = {"baseline": {"target_loss": 0.5, "target_step": 200, "time_to_target_s": 66.0, "losses": _curve(200)},
            "tuned": {"target_loss": 0.5, "target_step": 180, "time_to_target_s": 41.0, "losses": _curve(180)}}
    m = _measured([100, 90, 110], [162, 150, 170], conv)
    m.reference = Settings()
    line = analysis.verdict(analysis.summary(m))
    assert line.startswith("tuned is 1.62x baseline (")
    assert "data wait 30% -> 2.0%" in line
    assert "reached loss 0.5 in 41 s vs 66 s" in line


def test_the_verdict_says_when_tuned_misses_the_target_or_amp_diverges():
    base_curve = _curve(100, 2.0, 0.4)
    conv = {"baseline": {"target_loss": 0.5, "target_step": 90, "time_to_target_s": 30.0, "losses": base_curve},
            "tuned": {"target_loss": 0.5, "target_step": None, "steps": 97, "warmup_steps": 3, "wall_s": 20.0,
                      "losses": [x * 1.5 for x in base_curve]}}
    m = _measured([100, 100, 100], [150, 150, 150], conv)
    m.reference = Settings()
    line = analysis.verdict(analysis.summary(m))
    assert "tuned did NOT reach loss 0.5 (not within 100 steps" in line
    assert "AMP DIVERGED" in line


def test_an_interrupted_run_says_so_in_the_verdict():
    m = _measured([100], [])
    m.interrupted = True
    summary = analysis.summary(m)
    assert analysis.verdict(summary).startswith("interrupted, so far: no speed-up measured")


def test_the_table_has_a_row_for_everything_measured():
    conv = {"baseline": {"target_loss": 1.0, "target_step": 50, "time_to_target_s": 9.5, "losses": _curve(50)},
            "tuned": {"target_loss": 1.0, "target_step": 40, "time_to_target_s": 4.0, "losses": _curve(40)}}
    m = _measured([100, 90, 110], [162, 150, 170], conv)
    m.trials["baseline"][0] = trial(100, wait=0.3, peak_device_bytes=2 * 1024 ** 3)
    m.trials["tuned"][0] = trial(162, wait=0.02, gpu_util_mean=87.0)
    labels = [r[0] for r in report.rows(m, analysis.summary(m))]
    for want in ("samples/s (min-max)", "speed-up", "  waiting for data", "compute-only bound",
                 "peak host memory", "peak device memory", "GPU utilisation (NVML)", "time to loss 1"):
        assert want in labels


# ---------------------------------------------------------------- failures


def _facts(shm_total, container=None):
    return {"memory": {"shm_total": shm_total, "shm_free": shm_total}, "os": {"container": container},
            "cpu": {"usable_cpus": 8}}


def test_a_bus_error_in_a_container_with_dockers_shm_is_memory_E002():
    assert shm_finding(_facts(64 * MiB, "docker"))[0] == "memory.E002"
    err = WorkerError("shm", "a DataLoader worker died of a bus error: /dev/shm is too small for 4 DataLoader "
                             "workers (debtorch doctor: memory.E001)", {"finding": "memory.E001"})
    f = from_worker_error(err, "round 1/3: tuned", _facts(64 * MiB, "docker"))
    assert f.finding == "memory.E002" and "memory.E002" in f.message and "memory.E001" not in f.message
    assert "--shm-size" in f.fix and not f.user_input


def test_a_bus_error_elsewhere_is_memory_E001_with_the_remount_fix():
    fid, fix = shm_finding(_facts(32 * 1024 ** 3))
    assert fid == "memory.E001" and "remount" in fix
    assert shm_finding(None)[0] == "memory.E001"


@pytest.mark.parametrize("kind,code", [("workload", 2), ("no_torch", 2), ("broken_torch", 2), ("device", 2),
                                       ("settings", 2), ("oom", 1), ("shm", 1), ("died", 1), ("timeout", 1),
                                       ("exception", 1)])
def test_exit_codes_by_failure_kind_are_the_same_for_tune_and_verify_train(kind, code):
    from debtorch.cli.shared import exit_for
    from debtorch.transport.client import WorkerError

    assert exit_for(Failure(kind=kind, message="x")) == code
    assert exit_for(WorkerError(kind, "x")) == code         # what tune --measure sees


def test_the_oom_line_names_what_fits_and_the_global_batch():
    assert oom_message(Device.parse("cuda:0"), 64, 1, Fit(16, 4)) == (
        "the GPU ran out of memory at micro-batch 64; micro-batch 16 with accumulation_steps 4 fits "
        "(64 samples per optimizer step, as before)")
    assert "even micro-batch 1 does not fit" in oom_message(Device.parse("cuda"), 8, 1, None)


# ---------------------------------------------------------------- the plan, with a fake worker


class FakeWorker:
    """Answers trial requests like the engine's worker; out of memory above ``limit`` samples."""

    def __init__(self, limit=None, batch_size=32):
        self.limit, self.batch_size = limit, batch_size
        self.requests = []
        self.proc = object()

    def request(self, op, on_event=None, timeout=None, **req):
        if op == "host_waits":  # counting synchronisations (debtorch/hostwaits.py): none here
            return {"measured": True, "steps": req["steps"], "per_step": 0.0, "lines": [], "elsewhere_per_step": 0.0}
        self.requests.append(req)
        s = Settings.from_dict(req["settings"])
        mb = s.micro_batch or self.batch_size
        if self.limit is not None and mb > self.limit:
            raise WorkerError("oom", f"cuda ran out of memory at micro-batch {mb}",
                              {"suggestion": {"micro_batch": mb // 2, "accumulation_steps": 2}})
        for i in range(req["warmup"] + req["steps"]):
            if on_event:
                on_event({"event": "progress", "step": i + 1})
        return {"samples_per_s": 100.0, "losses": [1.0] * req["steps"], "warmup_losses": [],
                "mode": req["mode"], "target_loss": req.get("target_loss")}

    def close(self):
        pass

    def kill(self):
        pass


def _verifier(worker, **plan):
    v = Verifier(Plan(**plan))
    v.worker = worker
    v.measured.workload = LoadedWorkload(batch_size=worker.batch_size, target_loss=0.5)
    v.measured.device = Device.parse("cuda:0")
    return v


def test_rounds_run_every_arm_once_in_an_order_that_rotates():
    v = _verifier(FakeWorker(), repeats=3, converge_steps=0)
    jobs = v.jobs(Settings(), Settings(precision="bf16", fused_optimizer=True))
    arms = [j.arm for j in jobs]
    main = {"baseline", "tuned", "tuned_bare", "without precision", "without fused optimizer"}
    assert [j.kind for j in jobs[:4]] == [JobKind.PRIME] * 4  # baseline, tuned and the attribution arms, once each
    assert {j.kind for j in jobs[4:]} == {JobKind.ROUND}
    rounds = [arms[4 + 7 * r: 4 + 7 * (r + 1)] for r in range(3)]
    for r in rounds:
        assert set(r[:5]) == main and r[5:] in (["baseline_bound", "tuned_bound"], ["tuned_bound", "baseline_bound"])
    assert len({r[0] for r in rounds}) == 3  # a different arm leads each round: drift hits all alike
    without = {j.arm: j.settings for j in jobs if j.kind is JobKind.ROUND}
    assert without["without precision"] == Settings(fused_optimizer=True)
    assert without["without fused optimizer"] == Settings(precision="bf16")


def test_quick_runs_no_attribution_arms():
    v = _verifier(FakeWorker(), repeats=3, converge_steps=0, attribution=False)
    jobs = v.jobs(Settings(), Settings(precision="bf16", fused_optimizer=True))
    assert {j.arm for j in jobs if j.kind is JobKind.ROUND} == {"baseline", "tuned", "tuned_bare", "baseline_bound",
                                                                "tuned_bound"}
    assert {j.arm for j in jobs if j.kind is JobKind.PRIME} == {"baseline", "tuned"}
    assert Plan.quick_plan().attribution is False and Plan.quick_plan().budget_s == 13


def test_amp_gets_an_fp32_reference_unless_the_baseline_trains_the_same_curve():
    def converge(jobs):
        return [j.arm for j in jobs if j.kind is JobKind.CONVERGE]

    v = _verifier(FakeWorker(), repeats=3)
    same = converge(v.jobs(Settings(), Settings(precision="bf16", threads=2)))
    assert "reference" not in same and v.measured.reference.precision == "fp32"
    other = converge(v.jobs(Settings(), Settings(precision="bf16", lr_schedule="onecycle")))
    assert other[-1] == "reference"
    v.measured.reference = None
    fp32 = converge(v.jobs(Settings(), Settings(num_workers=2)))
    assert "reference" not in fp32 and v.measured.reference is None


def test_out_of_memory_halves_the_micro_batch_until_it_fits_keeping_the_global_batch():
    worker = FakeWorker(limit=8, batch_size=32)
    v = _verifier(worker, repeats=3, converge_steps=0)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure.kind == "oom" and not m.failure.user_input
    assert m.failure.suggestion == Fit(8, 4)
    assert m.failure.message.startswith("the GPU ran out of memory at micro-batch 32; micro-batch 8 with "
                                        "accumulation_steps 4 fits (32 samples per optimizer step, as before)")
    tried = [Settings.from_dict(r["settings"]).micro_batch for r in worker.requests]
    assert tried == [None, 16, 8]  # the first (warming-up) trial ran out of memory at 32


def test_an_oom_search_cut_short_by_another_failure_does_not_claim_micro_batch_1_fails():
    class DiesOnRetry(FakeWorker):
        def request(self, op, on_event=None, timeout=None, **req):
            if len(self.requests) >= 1:
                self.requests.append(req)
                raise WorkerError("died", "the worker was killed by SIGKILL while trial")
            return super().request(op, on_event, timeout, **req)

    v = _verifier(DiesOnRetry(limit=8, batch_size=32), repeats=3, converge_steps=0)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure.kind == "oom" and m.failure.suggestion is None
    assert m.failure.message == ("the GPU ran out of memory at micro-batch 32; the search for a micro-batch that "
                                 "fits stopped at micro-batch 16: the worker was killed by SIGKILL while trial")


def test_a_finished_plan_keeps_every_trial_under_its_arm():
    v = _verifier(FakeWorker(), repeats=3, converge_steps=20)
    m = v.run(Settings(), Settings(precision="bf16", lr_schedule="onecycle"))
    assert m.failure is None
    assert {k: len(v) for k, v in m.trials.items()} == {**{arm: 3 for arm in analysis.ARMS}, "tuned_sync": 0,
                                                        "without precision": 3}
    # The schedule changes no throughput: tuned with the baseline's schedule runs to the target instead.
    assert [name for name, _ in m.converge.runs()] == ["baseline", "tuned", "same_schedule", "reference"]
    assert m.converge.tuned.target_loss == 0.5


class ClockedWorker:
    """The worker's trial API on a fake clock: each trial costs its steps at ``speed(settings)``
    samples/s, times log-normal noise of ``sigma``; ``hang_at`` (a job label's start) never answers:
    the request waits out its timeout, as the real worker's does before it is killed."""

    def __init__(self, speed, sigma=0.02, seed=0, batch_size=32, hang_at=None):
        import random

        self.speed, self.sigma, self.rng, self.batch_size, self.hang_at = speed, sigma, random.Random(seed), \
            batch_size, hang_at
        self.now, self.proc, self.labels = 0.0, object(), []

    def clock(self):
        return self.now

    def request(self, op, on_event=None, timeout=None, **req):
        if op != "trial":
            return {"measured": False}
        s = Settings.from_dict(req["settings"])
        self.labels.append(req["mode"])
        if self.hang_at is not None and len(self.labels) >= self.hang_at:
            if on_event:
                on_event({"event": "progress", "phase": "warmup", "step": 1, "steps": req["warmup"]})
            self.now += timeout
            raise WorkerError("timeout", "the worker did not finish trial within its time limit; killed it")
        sps = self.speed(s) * math.exp(self.rng.gauss(0, self.sigma))
        step = self.batch_size / sps
        self.now += 0.5 + (req["steps"] + req["warmup"]) * step
        losses = [2.0 * 0.97 ** i for i in range(req["steps"])]
        return {"samples_per_s": sps, "step_median_s": step, "losses": losses, "warmup_losses": [],
                "steps": req["steps"], "mode": req["mode"], "target_loss": req.get("target_loss"),
                "wall_s": req["steps"] * step}

    def close(self):
        pass

    def kill(self):
        pass


def _clocked(worker, **plan):
    v = Verifier(Plan(**plan), clock=worker.clock)
    v.worker = worker
    v.measured.workload = LoadedWorkload(batch_size=worker.batch_size, target_loss=0.5)
    v.measured.device = CPU
    return v


def bf16_pays(s):
    return 100.0 * (1.6 if s.precision == "bf16" else 1.0)


def test_noisy_rounds_give_inconclusive_instead_of_a_speedup():
    """A busy machine (trials vary by half): rounds are added until the budget is spent, and the
    verdict says inconclusive and what would resolve it, never a speed-up."""
    worker = ClockedWorker(lambda s: 100.0 * (1.15 if s.precision == "bf16" else 1.0), sigma=0.5, seed=1)
    v = _clocked(worker, repeats=3, converge_steps=0, budget_s=400, attribution=False)
    m = v.run(Settings(), Settings(precision="bf16"))
    s = analysis.summary(m)
    assert m.failure is None and m.budget.stopped == "budget spent" and m.budget.rounds > 3
    assert s.speedup.verdict == "inconclusive"
    line = analysis.verdict(s)
    assert line.startswith("speed-up inconclusive (tuned/baseline ") and "would likely resolve it" in line
    assert "tuned is" not in line
    assert worker.now <= 400  # the rounds never overran the budget


def test_a_clear_speedup_resolves_in_the_first_rounds_and_keeps_the_budget_for_the_rest():
    worker = ClockedWorker(bf16_pays, sigma=0.02)
    v = _clocked(worker, repeats=3, converge_steps=60, budget_s=300)
    m = v.run(Settings(), Settings(precision="bf16", fused_optimizer=True, lr_schedule="onecycle"))
    s = analysis.summary(m)
    assert m.budget.rounds == 3 and m.budget.stopped == "resolved"
    assert analysis.verdict(s).startswith("tuned is 1.6") and s.speedup.verdict == "faster"
    # The report says which procedure decided, and after how many looks (text and JSON).
    looks = stats.Looks(3, 30)
    assert m.budget.to_json()["looks"] == looks.to_dict()
    assert s.sequential.to_json() == looks.to_dict(3) and s.sequential.taken == 1
    assert s.speedup.estimate.confidence == looks.confidence
    assert ("(stopped: the speed-up resolved at look 1 of at most 28; Pocock's boundary: every look's interval "
            "at 99.35%, 95% over all of them)") in report.rounds_lines(m, s, verbose=True)[0]
    # In plain words by default: the statistics under -v (issue 34, item 7).
    assert report.rounds_lines(m, s)[0].startswith("rounds: 3 interleaved (stopped: the speed-up resolved), ")
    assert [name for name, _ in m.converge.runs()] == ["baseline", "tuned", "same_schedule", "reference"]
    assert m.budget.spent_s <= 300


def test_attribution_credits_each_change_with_what_it_contributes():
    """bf16 makes the speed-up, the fused optimizer nothing: tuned without bf16 is as slow as the
    baseline, tuned without the fused optimizer as fast as tuned; the schedule is timed to target."""
    worker = ClockedWorker(bf16_pays, sigma=0.02)
    v = _clocked(worker, repeats=5, max_rounds=5, converge_steps=40, budget_s=600)
    v.measured.worker = {"threads": 2}
    m = v.run(Settings(), Settings(precision="bf16", fused_optimizer=True, threads=2, lr_schedule="onecycle"))
    s = analysis.summary(m)
    by = {e.entry.group: e for e in s.attribution}
    assert by["precision"].ratio.verdict == "faster" and 1.5 < by["precision"].ratio.value < 1.7
    assert by["fused optimizer"].ratio.verdict == "inconclusive" and 0.95 < by["fused optimizer"].ratio.value < 1.05
    assert "PyTorch's own choice here" in by["threads"].entry.note and by["threads"].entry.arm is None
    lines = texts(report.lines(m, s))
    at = lines.index("what each change contributes (tuned over tuned without it, same rounds):")
    assert lines[at + 1].startswith("  precision bf16: 1.")
    assert any(line.startswith("  lr_schedule onecycle: no throughput of its own; time to loss 0.5: ")
               for line in lines)
    rows = dict((r[0], r[1:]) for r in report.rows(m, s))
    assert rows["  baseline's schedule"][1] == analysis.converge_phrase(s.convergence.same_schedule)


def test_a_run_that_hangs_is_stopped_at_the_budget_naming_where():
    worker = ClockedWorker(bf16_pays, hang_at=1)
    v = _clocked(worker, repeats=3, converge_steps=0, budget_s=40)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure.kind == "budget" and not m.failure.user_input
    assert m.failure.message.startswith("stopped at the end of --budget 40 s in warming up: baseline, warm-up step "
                                        "2 of ")
    assert m.failure.line().endswith(": the workload hangs there, or needs a larger budget")
    assert worker.now <= 40


def test_a_hang_after_the_first_rounds_keeps_them_and_says_where_it_stopped():
    worker = ClockedWorker(bf16_pays, sigma=0.3, hang_at=20)  # 2 warm-ups, 3 rounds of 5, then a hang
    v = _clocked(worker, repeats=3, converge_steps=0, budget_s=200, attribution=False)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure is None and len(m.trials["tuned"]) >= 3 and m.budget.rounds == 3
    assert any(n.startswith("stopped at the end of --budget 200 s in round 4") for n in m.notes)
    assert worker.now <= 200


# ---------------------------------------------------------------- bad usage (nothing runs)


@pytest.mark.parametrize("args,message", [
    (["--repeats", "2"], "--repeats must be an integer from 3 to 1000 (got 2): medians need interleaved repeats"),
    (["--plot", "out.txt"], "must end in .png or .svg"),
    (["--plot", "/nonexistent-dir/x.png"], "does not exist"),
    (["--nnodes", "2"], "need --nproc N"),
    (["--steps", "1"], "--steps must be an integer from 2 to 1000000 (got 1)"),
    (["--python", "/nonexistent/python3"], "no such Python interpreter"),
])
def test_bad_options_are_one_line_and_exit_2(args, message):
    res = runner.invoke(app, ["verify-train", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_an_existing_plot_or_trace_is_kept_without_force(tmp_path):
    plot = tmp_path / "old.png"
    plot.write_bytes(b"mine")
    res = runner.invoke(app, ["verify-train", "--plot", str(plot)])
    assert res.exit_code == 2 and f"--plot {plot}: exists; use --force to replace it" in res.output
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "trace.json").write_text("{}")
    res = runner.invoke(app, ["verify-train", "--profile", str(tmp_path / "prof")])
    assert res.exit_code == 2 and "trace.json exists; use --force to replace it" in res.output
    assert plot.read_bytes() == b"mine" and (tmp_path / "prof" / "trace.json").read_text() == "{}"
    try:  # --force lets it through (where matplotlib is missing, only that may be refused)
        plot_report.check_plot_path(str(plot), force=True)
    except plot_report.PlotError as exc:
        assert "needs matplotlib" in str(exc), exc
    res = runner.invoke(app, ["verify-train", "--force"])
    assert res.exit_code == 2 and "--force only applies to --plot and --profile" in res.output


def test_a_one_line_exit_after_the_worker_started_does_not_leave_it_running(monkeypatch):
    from debtorch.train import runner as train_runner
    from debtorch.tune import rules

    workers = []

    class Started:
        def __init__(self, python, **kw):
            self.state = "running"
            workers.append(self)

        def start(self):
            return {}

        def request(self, op, on_event=None, timeout=None, **kw):
            return {"device": "cpu", "batch_size": 8, "convolutional": True} if op == "load" else {}

        def close(self):
            self.state = "closed"

        def kill(self):
            self.state = "killed"

    def refuse(facts, request):
        raise rules.RequestError("no rule fits")

    monkeypatch.setattr(train_runner, "TrainingWorker", Started)
    monkeypatch.setattr(rules, "recommend", refuse)
    res = runner.invoke(app, ["verify-train"])
    assert res.exit_code == 2 and "cannot tune for this machine: no rule fits" in res.output
    assert [w.state for w in workers] == ["killed"]


def test_a_config_that_does_not_load_is_named_with_its_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("schema_version = 1\n[loader]\nnum_workers = \"four\"\n")
    res = runner.invoke(app, ["verify-train", "--config", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:3: loader.num_workers: must be an integer from 0 to 65536" in res.output


def test_plot_without_matplotlib_is_one_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = runner.invoke(app, ["verify-train", "--plot", "x.png"])
    assert res.exit_code == 2 and "--plot needs matplotlib: pip install 'debtorch[plot]'" in res.output


def test_the_recorded_t4_container_with_64m_shm_gives_memory_E002(replay):
    """A real recorded host (tests/hosts): the doctor's own check decides the id."""
    from debtorch import facts as facts_mod

    host = replay("debian12-container-t4-shm64m")
    facts = facts_mod.collect(host, facts_mod.Options(sections=("os", "cpu", "memory")))
    fid, fix = shm_finding(facts)
    assert fid == "memory.E002" and "--shm-size" in fix
    vm = facts_mod.collect(replay("debian12-vm-2core"), facts_mod.Options(sections=("os", "cpu", "memory")))
    assert shm_finding(vm)[0] == "memory.E001"


def test_a_config_tuned_on_the_a100_server_is_stale_on_the_2_core_vm(replay):
    from debtorch import facts as facts_mod
    from debtorch import fingerprint
    from debtorch.verify.failures import stale_config

    def fp(name):
        return fingerprint.from_facts(facts_mod.collect(replay(name), facts_mod.Options(
            sections=("os", "cpu", "nvidia"))))

    diff = stale_config(fp("debian12-server-8xa100-nvlink"), fp("debian12-vm-2core"))
    assert any(d.startswith("gpus [NVIDIA A100") and d.endswith("-> none") for d in diff), diff
    assert stale_config(fp("debian12-vm-2core"), fp("debian12-vm-2core")) == []


def test_rounds_slowed_by_another_process_are_named():
    m = _measured([100, 20, 110, 105], [160, 150, 40, 170])
    summary = analysis.summary(m)
    assert summary.disturbed_rounds == [2, 3]
    assert any(line.startswith("noise: in rounds 2, 3 a trial ran at under half its median speed")
               for line in texts(report.lines(m, summary)))
    assert analysis.summary(_measured([100, 90, 110], [160, 150, 170])).disturbed_rounds == []


@pytest.mark.parametrize("option", ["--host", "--facts"])
def test_another_machine_is_refused_with_one_line(option, tmp_path):
    res = runner.invoke(app, ["verify-train", option, str(tmp_path)])
    assert res.exit_code == 2
    assert res.output == f"debtorch verify-train: {option} describes another machine; verify-train trains on this one\n"


def test_the_library_trains_only_on_the_live_machine(replay):
    from debtorch.verify import run

    with pytest.raises(run.Refused, match="trains on this machine, not a recorded one") as exc:
        run.prepare(run.Options(), replay("debian12-vm-2core"))
    assert exc.value.user_input


# ---------------------------------------------------------------- noisy rounds never overclaim


def test_the_issues_speedups_on_a_busy_machine_read_inconclusive():
    # verify-train --quick printed "tuned is 5.07x baseline (0.56-27.46)" and "0.34x (0.21-1.69)".
    for base, tuned in (([100, 10, 50], [56, 274.6, 253.5]), ([100, 100, 100], [21, 169, 34])):
        m = _measured(base, tuned)
        summary = analysis.summary(m)
        line = analysis.verdict(summary)
        assert summary.speedup.verdict == "inconclusive"
        assert line.startswith("speed-up inconclusive (tuned/baseline ") and "x baseline" not in line
        assert "more round" in line
        speed_row = dict((r[0], r[2]) for r in report.rows(m, summary))["speed-up"]
        assert speed_row.startswith("inconclusive (")


def test_a_share_of_the_bound_above_100_percent_is_a_failed_measurement():
    # "reached 329%": a bound trial slowed by another process in every round.
    m = _measured([100, 100, 100], [329, 300, 350])
    m.trials["tuned_bound"] = [trial(x) for x in (100, 120, 80)]
    m.trials["baseline_bound"] = [trial(x) for x in (130, 135, 128)]
    summary = analysis.summary(m)
    assert summary.bound_fraction.tuned.verdict == "failed measurement"
    assert summary.bound_fraction.baseline.verdict == "below"
    reached = dict((r[0], (r[1], r[2])) for r in report.rows(m, summary))["  reached"]
    assert reached[0].startswith("77%") and reached[1].startswith("failed measurement")
    assert "329%" not in " ".join(reached)
    # One round under its bound: not beyond noise, so inconclusive (still never 329%), and its interval
    # ends at 100%, what a share can be (issue 34, item 5).
    m.trials["tuned_bound"] = [trial(x) for x in (330, 400, 80)]
    summary = analysis.summary(m)
    reached = dict((r[0], r[2]) for r in report.rows(m, summary))["  reached"]
    assert reached.startswith("inconclusive (") and reached.endswith(" to 100%)"), reached
    assert summary.bound_fraction.tuned.high == 1.0


def test_a_bound_below_the_measured_rate_is_a_failed_measurement_not_a_figure():
    """verify-train --quick on a busy machine: baseline 1141.8 samples/s beside a compute-only bound of 6.9
    printed as a figure, one round (issue 34, item 5)."""
    m = _measured([1141.8], [6.6])
    m.trials["baseline_bound"] = [trial(6.9)]
    m.trials["tuned_bound"] = [trial(7.0)]
    summary = analysis.summary(m)
    rows = dict((r[0], (r[1], r[2])) for r in report.rows(m, summary))
    assert rows["compute-only bound"] == ("failed measurement (6.9, below the 1141.8 measured)", "7.0")
    assert rows["  reached"][0] == "failed measurement" and rows["  reached"][1].startswith("inconclusive")
    assert summary.bound_fraction.baseline.verdict == "failed measurement"
    assert "below the measured rate" in summary.bound_fraction.baseline.reason


def test_a_negative_instrumentation_cost_is_a_failed_measurement():
    # "instrumentation costing -86%": the bare loop's trials were the disturbed ones.
    m = _measured([100, 100, 100], [186, 190, 180])
    m.trials["tuned_bare"] = [trial(100)] * 3
    summary = analysis.summary(m)
    assert summary.instrumentation.verdict == "failed measurement"
    line = next(x for x in texts(report.lines(m, summary)) if x.startswith("instrumentation:"))
    assert "cost failed measurement (" in line and "cannot be faster" in line


def ddp(samples_per_s):
    """A 2-process run on gloo."""
    return DistributedResult(2, "gloo", samples_per_s, [], [])


def test_scaling_above_100_percent_is_a_failed_measurement_and_noise_is_inconclusive():
    # "461% scaling efficiency" for 2 processes: the single-process rounds were the slow ones.
    m = _measured([100, 100, 100], [100, 95, 110])
    m.ddp = [ddp(x) for x in (922, 900, 950)]
    summary = analysis.summary(m)
    sc = summary.scaling
    assert sc.efficiency.verdict == "failed measurement" and sc.efficiency.value > 4
    line = analysis.verdict(summary)
    assert "2 processes: scaling efficiency failed measurement (" in line and "461%" not in line
    m.ddp = [ddp(170)]          # --quick: one run
    assert "scaling efficiency inconclusive" in analysis.verdict(analysis.summary(m))
    m.trials["tuned"] = [trial(x) for x in (100, 101, 99)]
    m.ddp = [ddp(x) for x in (170, 171, 169)]
    assert "2 processes at 85% scaling efficiency" in analysis.verdict(analysis.summary(m))


# ---------------------------------------------------------------- a loss that is not finite (issue 13, item 5)


def test_a_nan_loss_in_both_curves_is_not_called_within_tolerance():
    nan = float("nan")
    out = analysis.compare_curves(curve(losses=[1.0, 0.9] + [nan] * 20), curve(losses=[1.0, 0.9] + [nan] * 20))
    assert out.diverged is None and out.reason == "the fp32 loss became non-finite at step 3: no curve to compare with"
    m = Measured(tuned=Settings(precision="bf16"), reference=Settings(precision="fp32"))
    m.converge = ConvergeRuns(tuned=trial(10, losses=[nan] * 12, nonfinite_loss_step=0, target_loss=0.5),
                              baseline=trial(10, losses=[nan] * 12, nonfinite_loss_step=0, target_loss=0.5))
    lines = texts(report.lines(m, analysis.summary(m)))
    assert not any("stays within" in x or "raise --max-steps" in x for x in lines), lines
    assert "convergence: tuned's loss became non-finite at step 1; more steps will not help" in lines


def test_every_run_whose_loss_became_nan_is_named_and_becomes_the_failure():
    from debtorch.verify.failures import nonfinite_loss

    m = Measured(baseline=Settings(precision="fp32"), tuned=Settings(precision="bf16"))
    m.trials["tuned"] = [trial(10), trial(10, nonfinite_loss_step=4)]
    m.converge = ConvergeRuns(tuned=trial(10, nonfinite_loss_step=2))
    events = analysis.summary(m).nonfinite_loss
    assert [e.to_json() for e in events] == [{"run": "round 2: tuned", "step": 5, "precision": "bf16"},
                                             {"run": "convergence: tuned", "step": 3, "precision": "bf16"}]
    f = nonfinite_loss(events)
    assert (f.kind, f.phase, f.user_input) == ("nonfinite_loss", "round 2: tuned", False)
    assert f.message == "the loss became non-finite (NaN or infinite) at step 5 (and in 1 more run(s))"
    assert f.fix.startswith('train in fp32 (precision = "fp32" in [compute]')
    m.trials["baseline"] = [trial(10, nonfinite_loss_step=0)]
    assert nonfinite_loss(analysis.summary(m).nonfinite_loss).fix.startswith("the loss diverges whatever")
    assert "LOSS NOT FINITE in 3 run(s), first round 1: baseline at step 1" in analysis.verdict(analysis.summary(m))


# ---------------------------------------------------------------- one budget rule (issue 34, item 4)


class PacedWorker(ClockedWorker):
    """A :class:`ClockedWorker` that reports every step as it goes, and runs into its timeout (the budget's
    end) while still making progress: a workload too slow for the budget, not one that hangs."""

    def request(self, op, on_event=None, timeout=None, **req):
        if op != "trial":
            return {"measured": False}
        s = Settings.from_dict(req["settings"])
        step = self.batch_size / self.speed(s)
        start = self.now
        for i in range(req["warmup"] + req["steps"]):
            if self.now + step - start > timeout:
                self.now = start + timeout
                raise WorkerError("timeout", "the worker did not finish trial within its time limit; killed it")
            self.now += step
            if on_event:
                on_event({"event": "progress", "phase": "warmup", "step": i + 1, "steps": req["warmup"] + req["steps"]})
        return {"samples_per_s": self.speed(s), "step_median_s": step, "losses": [1.0] * req["steps"],
                "warmup_losses": [], "steps": req["steps"], "mode": req["mode"], "wall_s": req["steps"] * step}


def test_a_budget_that_cannot_pay_for_one_round_is_refused_after_the_warm_up_trials():
    """verify-train --budget 30 on a workload whose rounds take 40 s each: the warm-up trials tell, the run
    stops there with the budget its first rounds need (exit 2), instead of spending the whole budget and
    failing (issue 34, item 4)."""
    worker = ClockedWorker(lambda s: 100.0, sigma=0.0)
    v = _clocked(worker, repeats=3, converge_steps=0, budget_s=30, attribution=False)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure.kind == "too_small" and m.failure.user_input
    need = m.failure.detail["need_s"]
    assert re.fullmatch(r"--budget 30 is too small for this workload: 0 s went to start-up, 4 s to its first "
                        r"trials, and one round of its trials needs at least 37 s of the 26 s left; give at least "
                        rf"{need}", m.failure.message), m.failure.message
    assert 100 < need < 130 and worker.now < 5 and not m.trials["baseline"]
    # A budget for one round but not three runs what it can: the verdict says what would resolve it.
    worker = ClockedWorker(lambda s: 100.0, sigma=0.0)
    m = _clocked(worker, repeats=3, converge_steps=0, budget_s=60, attribution=False).run(
        Settings(), Settings(precision="bf16"))
    assert m.failure is None and 1 <= m.budget.rounds < 3
    # With the budget it names (at least what the steps take), the rounds run.
    worker = ClockedWorker(lambda s: 100.0, sigma=0.0)
    m = _clocked(worker, repeats=3, converge_steps=0, budget_s=need, attribution=False).run(
        Settings(), Settings(precision="bf16"))
    assert m.failure is None and m.budget.rounds >= 2


def test_a_budget_that_ends_in_the_first_trials_while_they_progress_names_the_budget_that_would_do():
    worker = PacedWorker(lambda s: 10.0)   # 3.2 s a step
    v = _clocked(worker, repeats=3, converge_steps=0, budget_s=20, attribution=False)
    m = v.run(Settings(), Settings(precision="bf16"))
    assert m.failure.kind == "too_small" and m.failure.user_input, m.failure
    assert m.failure.message.startswith("--budget 20 is too small for this workload: ")
    assert m.failure.detail["need_s"] > 300   # 2 warm-up trials and 3 rounds of 5 trials of 23 steps


@pytest.mark.parametrize("args,said", [
    (["tune", "--measure", "--budget", "10"], "debtorch tune: --budget 10 is too small to measure anything; give at "
                                              "least 20 seconds"),
    (["verify-train", "--budget", "10"], "debtorch verify-train: --budget 10 is too small to measure anything; give "
                                         "at least 20 seconds"),
    (["verify-train", "--quick", "--budget", "3"], "debtorch verify-train: --budget 3 is too small to measure "
                                                   "anything; give at least 5 seconds"),
    (["fleet", "--probe", "--budget", "3"], "debtorch fleet: --budget 3 is too small to probe anything; give at "
                                            "least 5 seconds"),
])
def test_every_budget_too_small_for_anything_is_refused_at_once_in_the_same_words(args, said, monkeypatch):
    from debtorch.verify import measure

    def started(*a, **k):
        raise AssertionError("a worker started")

    monkeypatch.setattr(measure.Verifier, "spawn", started)
    res = cli_runner().invoke(app, args)
    assert res.exit_code == 2 and res.stderr == said + "\n"


def test_an_inconclusive_verdict_names_the_limit_that_stopped_the_rounds():
    """--quick --budget 10 stopped at --quick's round cap, not at the budget: the advice said
    "(--budget 10)" (issue 34, item 4)."""
    def noisy(s):
        return 100.0 * (1.15 if s.precision == "bf16" else 1.0)

    said = {}
    for name, plan in (("quick", {"quick": True, "max_rounds": 5, "budget_s": 10_000}),
                       ("full", {"max_rounds": 4, "budget_s": 10_000, "steps": 20}),
                       ("budget", {"max_rounds": 30, "budget_s": 400})):
        worker = ClockedWorker(noisy, sigma=0.5, seed=1)
        v = _clocked(worker, repeats=3, converge_steps=0, attribution=False, **plan)
        m = v.run(Settings(), Settings(precision="bf16"))
        s = analysis.summary(m)
        assert s.speedup.verdict == "inconclusive", name
        said[name] = (m.budget.stopped, analysis.verdict(s, m.plan), report.rounds_lines(m, s)[0])
    assert said["quick"][0] == "max rounds" and said["quick"][1].endswith(
        "to resolve it; --quick stops at 5 rounds: run without --quick)")
    assert "(stopped: the most rounds allowed (5 with --quick)" in said["quick"][2]
    assert said["full"][0] == "max rounds" and said["full"][1].endswith(
        "; verify-train stops at 4 rounds: longer trials narrow each round (--steps 40))")
    assert said["budget"][0] == "budget spent" and "(--budget " in said["budget"][1]
    assert "--budget" not in said["quick"][1] + said["full"][1]


# ---------------------------------------------------------------- what next, in plain words (issue 34, item 7)


def _outcome(m, config=None):
    from debtorch.verify.run import Outcome

    s = analysis.summary(m)
    return Outcome(m, s, analysis.verdict(s, m.plan), [], config, {})


def test_every_verdict_is_followed_by_a_next_line():
    # Tuned by the rules, faster: measure settings for the user's own workload.
    m = _measured([100, 101, 99, 100], [150, 151, 149, 150])
    m.plan = Plan(workload="mymod:make")
    said = [x.text for x in report.VerifyView(_outcome(m, TunedBy("rules", {})), 0).lines()[1:]]
    assert said[-1] == ("next: measure settings for your own workload: debtorch tune --measure --workload mymod:make "
                        "--write debtorch.toml, then debtorch verify-train --config debtorch.toml")
    # A config that pays: use it in training.
    config = TunedBy("config", {"path": "/p/t.toml"}, "/p/t.toml")
    said = [x.text for x in report.VerifyView(_outcome(m, config), 0).lines()[1:]]
    assert said[-1].startswith('next: use it in training: cfg = debtorch.load("t.toml") (docs/runtime.md)')
    # Host waits read from the code: lint names them.
    m.host_waits = HostWaits(measured=False, steps=None, per_step=2.0, lines=[], file="/p/train.py")
    assert report.next_steps(_outcome(m, TunedBy("config", {"path": "t.toml"}, "t.toml")))[-1] == (
        "remove the host's waits for the device in the loop: debtorch lint train.py")
    # --quick's cap stopped an inconclusive run: without --quick.
    worker = ClockedWorker(lambda s: 100.0 * (1.15 if s.precision == "bf16" else 1.0), sigma=0.5, seed=1)
    m = _clocked(worker, repeats=3, converge_steps=0, attribution=False, quick=True, max_rounds=5,
                 budget_s=10_000).run(Settings(), Settings(precision="bf16"))
    assert report.next_steps(_outcome(m))[0] == "run without --quick: --quick stops at 5 rounds"


def test_a_data_wait_share_that_rises_while_the_step_shortens_is_explained():
    """`data wait 90% -> 93%` read like a regression where the device was simply fed faster."""
    m = _measured([100] * 3, [300] * 3)
    m.trials["baseline"] = [trial(100, wait=0.90, data_wait_s=[0.0090] * 4, compute_s=[0.0010] * 4)] * 3
    m.trials["tuned"] = [trial(300, wait=0.93, data_wait_s=[0.0031] * 4, compute_s=[0.0002] * 4)] * 3
    text = texts(report.lines(m, analysis.summary(m)))
    assert ("data wait 90% -> 93%: a larger share of a shorter step, not more waiting: the wait per step fell "
            "(9.0 ms -> 3.1 ms) and the rest of the step fell more (1.0 ms -> 0.2 ms)") in text
    # Waiting longer per batch is said as such.
    m.trials["tuned"] = [trial(90, wait=0.93, data_wait_s=[0.0120] * 4, compute_s=[0.0010] * 4)] * 3
    assert any("tuned waits longer for each batch (9.0 ms -> 12 ms a step)" in x
               for x in texts(report.lines(m, analysis.summary(m))))


def test_alike_median_steps_beside_a_throughput_difference_are_explained():
    m = _measured([100] * 3, [109] * 3)
    m.workload = LoadedWorkload(batch_size=32)
    for arm in ("baseline", "tuned"):
        m.trials[arm] = [dataclasses.replace(r, step_median_s=0.290) for r in m.trials[arm]]
    text = texts(report.lines(m, analysis.summary(m)))
    assert ("step time: the median steps are alike (290 ms vs 290 ms) but samples/s differs by 9%: the difference "
            "lies in the slower steps and between steps (mean step 320 ms vs 294 ms), which a median leaves out (an "
            "epoch's start, where loader workers restart unless persistent)") in text


def test_two_rounds_read_inconclusive_with_the_rounds_that_would_resolve_it_never_an_absurd_interval():
    # verify-train with 2 rounds printed "inconclusive (0.00x to 1820361.66x)".
    m = _measured([100, 100], [110, 300])
    summary = analysis.summary(m)
    sp = summary.speedup
    row = dict((r[0], r[2]) for r in report.rows(m, summary))["speed-up"]
    line = analysis.verdict(summary)
    assert row == "inconclusive (2 rounds)"
    assert line.startswith(f"speed-up inconclusive (2 rounds; about {sp.more_rounds} more rounds would likely "
                           "resolve it")
    assert sp.more_rounds > 1
    doc = summary.to_json()["speedup"]
    assert doc["interval_unresolved"] is True and doc["low"] is not None and doc["high"] is not None
    texts_said = " ".join(texts(report.lines(m, summary)))
    assert not re.search(r"\d{4,}\.\d\dx|0\.00x", line + row + texts_said)
