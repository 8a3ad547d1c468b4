"""--measure: the driver around the search, with a fake engine and with the real one."""

import json
import math
import os
import sys

import pytest
from clitools import ROOT, at_once, cli_runner
from tune_facts import make_facts

from debtorch.train.result import LoadedWorkload, TrialResult
from debtorch.tune import measure as measure_mod
from debtorch.tune.config import load_config
from debtorch.tune.measure import MeasureError, MeasureOptions, MeasureUsageError, measure
from debtorch.tune.rules import recommend

WORKLOADS = ROOT / "tests" / "workloads"


class FakeEngine:
    """The engine's trial API on a formula, with a fake clock that the trials advance."""

    def __init__(self, f, step_overhead=0.2, batch=32, noise=0.02, fail=None):
        import random

        self.f, self.overhead, self.batch, self.fail = f, step_overhead, batch, fail
        self.rng = random.Random(0)
        self.now = 0.0
        self.calls = []
        self.info = LoadedWorkload(batch_size=batch, convolutional=True)

    def clock(self):
        return self.now

    def trial(self, settings, steps, warmup):
        self.calls.append((settings.short(), steps))
        if self.fail and self.fail(settings, len(self.calls)):
            self.now += self.overhead
            raise RuntimeError("DataLoader worker (pid 123) is killed by signal: Bus error")
        sps = self.f(settings) * math.exp(self.rng.gauss(0, 0.02))
        self.now += self.overhead + (steps + warmup) * self.batch / sps
        return TrialResult(samples_per_s=sps, data_wait_share=0.05, wall_s=steps * self.batch / sps, steps=steps)


def like_this_vm(s):
    v = 60.0 * (1.7 if s.precision == "bf16" else 1.0) * (1.1 if s.channels_last else 1.0)
    v *= 1.0 if (s.threads or 2) == 2 else 0.6
    return v * (0.8 ** s.num_workers)


def vm_rec():
    facts = make_facts(cpus=2, features={"avx512_bf16": True}, torch="2.13.0+cpu", torch_cuda=None)
    return recommend(facts), facts


def test_measurement_writes_what_it_measured_into_the_reasons():
    rec, facts = vm_rec()
    engine = FakeEngine(like_this_vm)
    result = measure(rec, facts, MeasureOptions(budget_s=200), trials=engine, clock=engine.clock)
    assert rec.chosen_by == "measured"
    assert rec.settings.precision == "bf16" and rec.settings.channels_last and rec.settings.num_workers == 0
    assert rec.reasons["precision"].rule == "tune.M003"
    assert rec.reasons["channels_last"].rule == "tune.M004"
    assert rec.reasons["channels_last"].text.startswith("channels_last=on: ")
    assert rec.reasons["num_workers"].rule == "tune.M006" and rec.reasons["threads"].rule == "tune.M006"
    assert " samples/s vs " in rec.reasons["num_workers"].text
    assert rec.settings.validate() == []
    assert result.spent <= 200
    assert engine.calls[0][1] == 2  # the warm-up trial, then calibration, then the search


def test_a_dimension_never_raced_keeps_the_rules_reason_and_one_raced_without_effect_says_so():
    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 60.0 * (0.8 ** s.num_workers))  # only the workers matter
    result = measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    assert rec.settings.num_workers == 0 and not result.choices["prefetch_factor"].measured
    assert rec.reasons["prefetch_factor"].rule == "tune.R007"  # no workers: prefetch was never raced
    assert rec.reasons["channels_last"].rule == "tune.M005"
    assert rec.reasons["channels_last"].text.startswith("channels_last: no measurable difference among off, on")


def test_dependent_settings_follow_a_measured_worker_count():
    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 50.0 * (1.5 if s.num_workers == 2 else 1.0) * (1.3 if s.threads == 1 else 1.0))
    measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    s = rec.settings
    assert (s.num_workers, s.threads) == (2, 1)
    assert (s.prefetch_factor, s.persistent_workers, s.start_method) == (2, True, "fork")
    assert rec.reasons["persistent_workers"].rule == "tune.R008"
    assert rec.env["OMP_NUM_THREADS"] == "1"


def test_failing_trials_are_recorded_and_avoided():
    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 50.0 * (1 + s.num_workers), fail=lambda s, n: s.num_workers >= 2)
    result = measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    assert rec.settings.num_workers == 1
    assert any(t.error and "Bus error" in t.error for t in result.trials)


def test_budget_below_the_minimum_runs_nothing():
    rec, facts = vm_rec()
    engine = FakeEngine(like_this_vm)
    with pytest.raises(MeasureUsageError, match=r"^--budget 5 is too small to measure anything; give at least 20"):
        measure(rec, facts, MeasureOptions(budget_s=5), trials=engine, clock=engine.clock)
    assert engine.calls == []


def test_budget_too_small_for_this_workload_says_what_would_do():
    class Bounded(FakeEngine):
        """Like EngineTrials: a trial the budget cannot finish is stopped at its end."""

        def trial(self, settings, steps, warmup):
            before = self.now
            out = super().trial(settings, steps, warmup)
            if self.now > 60:
                self.now = max(before, 60.0)
                raise measure_mod.BudgetStop("stopped at the end of --budget 60 s in trial 2 (w0 bf16 t2), "
                                             "timed step 2 of 5: the workload hangs there, or needs a larger budget",
                                             at="trial 2 (w0 bf16 t2), timed step 2 of 5")
            return out

    rec, facts = vm_rec()
    engine = Bounded(lambda s: 4.0)  # 8 seconds a step
    with pytest.raises(MeasureUsageError) as exc:
        measure(rec, facts, MeasureOptions(budget_s=60), trials=engine, clock=engine.clock)
    assert str(exc.value).startswith("--budget 60 is too small for this workload: 0 s went to start-up, ")
    assert "(the calibration trial was trial 2 (w0 bf16 t2), timed step 2 of 5 when it ended)" in str(exc.value)
    assert engine.now <= 60  # found out within the budget
    assert "\n" not in str(exc.value)


def test_a_first_trial_that_fails_is_a_failed_measurement():
    rec, facts = vm_rec()
    engine = FakeEngine(like_this_vm, fail=lambda s, n: True)
    with pytest.raises(MeasureError, match="the first trial failed: .*Bus error") as exc:
        measure(rec, facts, MeasureOptions(budget_s=100), trials=engine, clock=engine.clock)
    assert not isinstance(exc.value, MeasureUsageError)


def test_precisions_measured_are_only_those_the_hardware_has():
    rec, facts = vm_rec()
    assert measure_mod.precisions_for(rec, facts) == ["fp32", "bf16"]
    plain = make_facts(cpus=2)
    assert measure_mod.precisions_for(recommend(plain), plain) == ["fp32"]
    v100 = make_facts(cpus=8, gpus=[("V100", "7.0")])
    assert measure_mod.precisions_for(recommend(v100), v100) == ["fp32", "fp16"]


# -- the real engine -------------------------------------------------------------


def tune_in_workloads(*args, timeout=180):
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "debtorch", "tune", "--python", sys.executable, *args],
                          capture_output=True, text=True, cwd=WORKLOADS, env=env, timeout=timeout)


BAD_WORKLOADS = [
    ("nosuchmodule:make", "cannot import nosuchmodule"),
    ("tiny:nothere", "tiny has no function nothere"),
    ("tiny:wrong", "tiny:wrong returned a list"),
    ("broken:make", "this module is broken on purpose"),
    ("tiny", "must be module:function"),
]


@pytest.fixture(scope="module")
def bad_workloads(tmp_path_factory):
    """tune --measure --write with each of BAD_WORKLOADS, run at once: workload -> (result, its folder)."""
    def run(workload):
        folder = tmp_path_factory.mktemp("bad")
        r = tune_in_workloads("--measure", "--budget", "30", "--workload", workload, "--write",
                              str(folder / "debtorch.toml"))
        return r, folder

    return at_once({w: (lambda w=w: run(w)) for w, _ in BAD_WORKLOADS})


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("workload,message", BAD_WORKLOADS)
def test_bad_workload_is_one_line_and_exit_2(bad_workloads, workload, message):
    r, folder = bad_workloads[workload]
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("debtorch tune: ") and message in r.stderr
    assert not (folder / "debtorch.toml").exists() and not list(folder.iterdir())


def test_an_interpreter_without_torch_is_bad_input(tmp_path):
    import shutil
    import subprocess

    system = shutil.which("python3", path="/usr/bin")
    if system is None or subprocess.run([system, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without torch")
    from debtorch.cli import app

    for python, message in ((system, "has no torch"), (str(tmp_path / "nope"), "nope: not an executable file")):
        r = cli_runner().invoke(app, ["tune", "--measure", "--budget", "30", "--python", python])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_measure_on_a_real_workload_writes_a_measured_config(tmp_path):
    out = tmp_path / "debtorch.toml"
    r = tune_in_workloads("--measure", "--budget", "30", "--workload", "tiny:make", "--write", str(out),
                          "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["chosen_by"] == "measured" and doc["measurement"]["trials"]
    assert doc["measurement"]["spent_s"] <= 30  # the whole command's time, start-up included
    cfg = load_config(str(out))
    assert cfg.tuned["by"] == "measured" and cfg.tuned["workload"] == "tiny:make"
    assert any(r["rule"].startswith("tune.M") for r in doc["reasons"].values())


def test_table_of_trials_marks_the_choice_and_shows_failures():
    from debtorch.report.tune import trials_lines

    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 50.0 * (1 + s.num_workers), fail=lambda s, n: s.num_workers >= 2)
    result = measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    lines = trials_lines(result)
    assert lines[0].startswith(f"trials: {len(result.trials)} in ")
    chosen = [line for line in lines if line.endswith("<- chosen")]
    assert len(chosen) == 1 and chosen[0].split()[0:2] == rec.settings.short().split()[0:2]
    assert any("failed" in line for line in lines) and any("error: DataLoader worker" in line for line in lines)


def test_table_of_trials_names_one_budget_when_it_runs_out():
    from debtorch.report.tune import trials_lines

    rec, facts = vm_rec()
    engine = FakeEngine(like_this_vm)
    result = measure(rec, facts, MeasureOptions(budget_s=30), trials=engine, clock=engine.clock)
    head = trials_lines(result)[0]
    assert head.endswith("of a 30 s budget (budget spent)"), head


@pytest.mark.slow
@pytest.mark.torch
def test_sigterm_stops_the_worker_and_leaves_no_temporary_folder(tmp_path):
    """A batch scheduler's kill (SIGTERM) mid-measurement: exit 143, nothing written, nothing left in TMPDIR."""
    import shutil
    import signal
    import subprocess
    import tempfile
    import time
    from pathlib import Path

    # A short TMPDIR, where the worker's folder is made (a long one sends it to /tmp: transport.client's
    # short_tmp_base), so that the test sees it come and go.
    tmp = Path(tempfile.mkdtemp(prefix="dt-", dir="/tmp"))
    out = tmp_path / "debtorch.toml"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", "tune", "--python", sys.executable, "--measure",
                             "--budget", "60", "--workload", "tiny:make", "--write", str(out)],
                            cwd=WORKLOADS, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(p.name.startswith("debtorch-worker-") for p in tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(p.name.startswith("debtorch-worker-") for p in tmp.iterdir()), "the worker never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    try:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err
        assert not out.exists() and list(tmp.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_choice_within_noise_of_the_runner_up_says_so_in_the_reasons_and_the_table():
    from debtorch.report.tune import TuneView, trials_lines
    from debtorch.tune.run import Tuned

    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 60.0)  # nothing matters: no winner to name
    result = measure(rec, facts, MeasureOptions(budget_s=200), trials=engine, clock=engine.clock)
    assert result.within_noise and result.runner_up is not None
    close = f"within noise of {result.runner_up.short()}"
    differ = [n for n, v in rec.settings.to_dict().items() if result.runner_up.to_dict()[n] != v
              and rec.reasons[n].rule.startswith("tune.M")]
    assert differ and all(close in rec.reasons[n].text for n in differ)
    assert any(note.startswith("measured: ") and close in note for note in rec.notes)
    assert any(line.startswith(f"the chosen settings are {close}") for line in trials_lines(result))
    doc = TuneView(Tuned(rec, {}, result)).document()["measurement"]
    assert doc["within_noise_of"] == result.runner_up.short()
    # ... and which procedure judged "beyond noise": Pocock's boundary over the looks a pair can get
    assert doc["sequential"]["procedure"] == "pocock" and doc["sequential"]["most_looks"] == 20
    assert "beyond noise: Pocock's boundary, 20 looks a pair at most, each at 99.25%" in trials_lines(result, True)
    assert not any("Pocock" in line for line in trials_lines(result))   # statistics under -v (issue 34, item 7)


def test_the_written_reasons_show_the_split_was_searched():
    rec, facts = vm_rec()
    engine = FakeEngine(lambda s: 50.0 * {(2, 0): 1.0, (1, 0): 0.6, (2, 2): 0.9, (1, 2): 1.2}.get(
        (s.threads, s.num_workers), 0.8))
    measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    assert (rec.settings.threads, rec.settings.num_workers) == (1, 2)
    for name in ("threads", "num_workers"):
        assert rec.reasons[name].rule == "tune.M006"
        text = rec.reasons[name].text
        assert text.startswith("threads=1 workers=2: ") and "splits of 2 CPUs raced" in text


def test_the_report_says_what_each_changed_choice_contributes_from_the_trials_it_ran():
    from debtorch.report.tune import TuneView, trials_lines
    from debtorch.tune.run import Tuned

    rec, facts = vm_rec()  # the rules already choose bf16 and two threads here
    engine = FakeEngine(like_this_vm)  # channels_last 1.1x: the one change the search makes
    result = measure(rec, facts, MeasureOptions(budget_s=300), trials=engine, clock=engine.clock)
    lines = trials_lines(result)
    at = lines.index("what each changed choice contributes (chosen / the same with the rules' value, trials above):")
    assert lines[at + 1:] == [lines[at + 1]] and lines[at + 1].startswith(
        "  channels_last=True (rules: w0 bf16 t2): 1.1")  # a ratio with its interval: resolved
    assert lines[at + 1].endswith("x)")
    doc = TuneView(Tuned(rec, {}, result)).document()["measurement"]["contributions"]
    assert [(c["dimension"], c["verdict"]) for c in doc] == [("channels_last", "faster")]


class Loaded(FakeEngine):
    """Like EngineTrials on a machine where load may arrive mid-search: from the 12th trial on, every trial
    takes ``slower`` times what its settings took before; the budget cuts one that runs past what it leaves,
    and stopping the worker (a kill, at the cut or at the end) costs time of its own, less than starting it."""

    START_S, KILL_S = 1.5, 0.4

    def __init__(self, f, seconds, slower=1.0):
        from debtorch.budget import Budget

        super().__init__(f)
        self.slower = slower
        self.budget = Budget(seconds, start=0.0, clock=self.clock)
        self.now += self.START_S      # the worker's start, on the command's clock
        self.stop_s = self.START_S    # what EngineTrials measures: its start, the bound on a stop
        self.alive = True
        self.cut = False

    def trial(self, settings, steps, warmup):
        began, deadline = self.now, self.now + self.budget.left()
        result = super().trial(settings, steps, warmup)
        if len(self.calls) >= 12:
            self.now = began + self.slower * (self.now - began)
        if self.now > deadline:
            self.now = deadline + self.KILL_S
            self.alive, self.cut = False, True
            raise measure_mod.BudgetStop("stopped at the end of --budget 30 s in trial 12, timed step 9 of 40",
                                         hung=False, at="trial 12, timed step 9 of 40")
        return result

    def close(self):
        if self.alive:
            self.now += self.KILL_S
            self.alive = False


@pytest.mark.parametrize("slower", [1.0, 8.0])
def test_the_budget_holds_with_the_last_trial_and_the_workers_stop_in_it(slower):
    # tune --measure --budget 30 spent 30.04-30.08 s under load: a trial longer than any before it was cut at
    # the budget's very end and the worker killed after it; and a search that ended on time left the worker's
    # stop after the budget.
    rec, facts = vm_rec()
    engine = Loaded(like_this_vm, 30.0, slower)
    result = measure(rec, facts, MeasureOptions(budget_s=30), trials=engine, clock=engine.clock,
                     budget=engine.budget)
    engine.close()                # what the command does next: stop the worker (gone already after a cut)
    assert result.spent <= 30 and engine.now <= 30
    assert engine.cut == (slower > 1) and result.reserve == Loaded.START_S and rec.chosen_by == "measured"
