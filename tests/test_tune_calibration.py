"""Rules calibrated in seconds: the calibration's trials on a fake engine (a formula and a fake clock),
the sizing rules (tune.C001-C003) as pure functions of the facts and a calibration, and (slow) the
real path through tune and verify-train."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Optional

import pytest
from clitools import ROOT
from tune_facts import GiB, MiB, make_facts

from debtorch.train.device import CPU, CUDA, Device
from debtorch.train.result import TrialResult
from debtorch.train.settings import Settings
from debtorch.tune import calibration, rules
from debtorch.tune.calibration import Calibration, calibrate
from debtorch.tune.rules import Request, recommend

SIM = Device.parse("sim:1000,launch=1,gbps=25,ahead=3,sync=0")


class Pipeline:
    """A loader and a device as the engine would time them, on a fake clock: one process loads a batch in
    ``fetch_s`` (a worker delivers at ``worker_rate``), the training process spends ``host_s`` a batch, the
    device takes a batch in ``device_s``.  ``trial`` returns the engine's result keys the calibration reads."""

    def __init__(self, fetch_s: float = 0.064, host_s: float = 0.001, device_s: float = 0.032,
                 worker_rate: Optional[float] = None, batch: int = 32, spread: float = 1.2,
                 batch_bytes: int = 1_573_120) -> None:
        self.fetch_s, self.host_s, self.device_s, self.batch = fetch_s, host_s, device_s, batch
        self.worker_rate = worker_rate if worker_rate is not None else 0.9 * batch / fetch_s
        self.spread, self.batch_bytes = spread, batch_bytes
        self.now = 0.0
        self.calls: list = []

    def clock(self) -> float:
        return self.now

    def trial(self, settings: Settings, steps: int, warmup: int) -> TrialResult:
        self.calls.append((settings.short(), steps, warmup))
        b = self.batch
        if settings.num_workers == 0:
            step = self.fetch_s + max(self.host_s, self.device_s)
            waits = [self.fetch_s * (self.spread if i % 10 == 0 else 1.0) for i in range(steps)]
            computes = [max(self.host_s, self.device_s)] * steps
            sps, share = b / step, self.fetch_s / step
        else:
            supply = min(settings.num_workers * self.worker_rate, b / self.host_s)
            sps = min(supply, b / self.device_s)
            step = b / sps
            share = max(0.02, 1 - sps / (b / self.device_s))
            waits, computes = [share * step] * steps, [(1 - share) * step] * steps
        settle = 4 if settings.num_workers else 0
        self.now += 0.3 * bool(settings.num_workers) + (steps + warmup + settle) * step
        return TrialResult(samples_per_s=sps, step_median_s=step, data_wait_s=waits, compute_s=computes,
                           data_wait_share=share, batch_bytes=self.batch_bytes)


def sim_pipeline(rate: float, loader_rate: float = 500.0, worker_rate: Optional[float] = None, **kw) -> Pipeline:
    return Pipeline(fetch_s=32 / loader_rate, device_s=32 / rate, worker_rate=worker_rate, **kw)


def _cal(**kw) -> Calibration:
    base = dict(device=SIM, micro_batch=32, loader_rate=500.0, in_process_rate=450.0, main_batch_s=0.001,
                device_rate=1000.0, device_source="simulated", threads=1, batch_bytes=1_573_120, fetch_s=0.064,
                fetch_p90_s=0.07, worker_rate=480.0, worker_kept_up=False, seconds=12.0, trials=3)
    base.update(kw)
    return Calibration(**base)


def sim_rec(cal: Calibration, cpus: int = 2, **facts) -> rules.Recommendation:
    return recommend(make_facts(cpus=cpus, **facts), Request(device=cal.device, calibration=cal))


# ---------------------------------------------------------------------------- the calibration's trials


def test_the_calibration_measures_the_loader_the_device_and_one_worker_within_its_time():
    p = sim_pipeline(1000.0, loader_rate=500.0, worker_rate=470.0)
    cal = calibrate(p.trial, Settings(threads=1, pin_memory=True), SIM, 32, cpus=2, clock=p.clock)
    assert cal.loader_rate == pytest.approx(500.0, rel=0.01)
    assert cal.device_rate == 1000.0 and cal.device_source == "simulated"
    assert cal.worker_rate == pytest.approx(470.0) and not cal.worker_kept_up
    assert cal.per_worker == pytest.approx(470.0)
    assert cal.batch_bytes == 1_573_120 and cal.trials == 3
    assert cal.seconds <= calibration.CALIBRATION_S
    assert [c[0] for c in p.calls] == ["w0 pin fp32 t1", "w0 pin fp32 t1", "w1 pf2 pin fp32 t1"]


def test_the_calibration_keeps_to_a_shorter_budget_and_leaves_out_what_does_not_fit():
    p = sim_pipeline(1000.0)
    cal = calibrate(p.trial, Settings(threads=1), SIM, 32, cpus=2, seconds=1.0, clock=p.clock)
    assert cal.worker_rate is None and cal.skipped.startswith("no time left for a trial with a worker")
    assert cal.seconds <= 1.5   # the probe and a 3-step trial: the least it can measure


def test_a_device_one_process_keeps_up_with_needs_no_worker_trial():
    p = sim_pipeline(300.0, loader_rate=500.0)
    cal = calibrate(p.trial, Settings(threads=1), Device.parse("sim:300,launch=1,gbps=25,ahead=3,sync=0"), 32, cpus=2,
                    clock=p.clock)
    assert cal.worker_rate is None and "keeps up" in cal.skipped and len(p.calls) == 2


def test_on_a_cpu_the_device_rate_is_the_compute_and_the_worker_trial_takes_a_thread():
    p = Pipeline(fetch_s=0.05, device_s=0.05)
    cal = calibrate(p.trial, Settings(threads=2), CPU, 32, cpus=2, clock=p.clock)
    assert cal.device_rate == pytest.approx(32 / 0.05)
    assert "compute at 2 thread(s)" in cal.device_source
    assert cal.worker_threads == 1 and p.calls[-1][0].startswith("w1 pf2")


def test_a_trial_without_per_step_times_is_one_line():
    def bare(settings: Settings, steps: int, warmup: int) -> TrialResult:
        return TrialResult(samples_per_s=100.0, step_median_s=0.3)

    with pytest.raises(calibration.CalibrationError, match="no per-step times"):
        calibrate(bare, Settings(), CPU, 32, cpus=2)


def test_the_time_left_for_the_worker_trial_never_starts_a_trial_past_it():
    for seconds in (2.0, 4.0, 8.0, 15.0, 40.0):
        p = sim_pipeline(1500.0, loader_rate=300.0, worker_rate=200.0)   # a worker slower than expected
        cal = calibrate(p.trial, Settings(threads=1), SIM, 32, cpus=2, seconds=seconds, clock=p.clock)
        assert cal.seconds <= min(seconds, calibration.CALIBRATION_S) * 1.1 + 0.6, seconds


# ---------------------------------------------------------------------------- tune.C001: an accelerator


def test_an_accelerator_at_1_5x_one_worker_gets_two_workers_and_the_reason_names_the_numbers():
    rec = sim_rec(_cal(device_rate=700.0, worker_rate=470.0))
    assert rec.settings.num_workers == 2 and rec.reasons["num_workers"].rule == "tune.C001"
    text = rec.reasons["num_workers"].text
    assert text.startswith("one worker delivers 470 samples/s") and "the device takes 700" in text
    assert "2 worker(s) feed it" in text and "2 usable CPUs" in text
    assert rec.chosen_by == "calibrated" and rec.settings.threads == 1
    assert rec.settings.prefetch_factor == 2 and rec.reasons["prefetch_factor"].rule == "tune.C002"


def test_an_accelerator_beyond_the_cpus_is_input_bound_and_says_what_feeding_it_takes():
    rec = sim_rec(_cal(device_rate=2000.0, worker_rate=470.0))
    assert rec.settings.num_workers == 2
    text = rec.reasons["num_workers"].text
    assert "input-bound here" in text and "about 4.3 CPUs of loading" in text


def test_a_device_the_cpus_just_feed_says_so_without_calling_it_input_bound():
    rec = sim_rec(_cal(device_rate=900.0, worker_rate=470.0))   # 1.9 workers' worth on 1.97 CPUs
    text = rec.reasons["num_workers"].text
    assert rec.settings.num_workers == 2 and "2 worker(s) just feed it" in text and "input-bound" not in text


def test_a_machine_with_cpus_to_spare_gets_the_workers_the_rate_needs_not_all_its_cpus():
    rec = sim_rec(_cal(device_rate=2000.0, worker_rate=470.0), cpus=32)
    assert rec.settings.num_workers == math.ceil(2000 / 470 * rules.HEADROOM) == 5


def test_a_worker_that_kept_up_counts_at_least_what_one_process_loads():
    rec = sim_rec(_cal(device_rate=400.0, worker_rate=390.0, worker_kept_up=True, loader_rate=900.0))
    assert rec.settings.num_workers == 1 and "one process loads 900" in rec.reasons["num_workers"].text


def test_on_a_gpu_one_cpu_drives_it():
    cal = _cal(device=CUDA, device_rate=3000.0, device_source="measured", worker_rate=400.0)
    rec = recommend(make_facts(cpus=16, gpus=[("NVIDIA A100-SXM4-80GB", "8.0")]),
                    Request(calibration=cal))
    assert rec.settings.num_workers == math.ceil(3000 / 400 * rules.HEADROOM)
    assert "one drives the GPU" in rec.reasons["num_workers"].text


def test_a_varying_load_time_gets_a_deeper_queue():
    rec = sim_rec(_cal(fetch_s=0.05, fetch_p90_s=0.1))
    assert rec.settings.prefetch_factor == 4 and "absorb the slow ones" in rec.reasons["prefetch_factor"].text


def test_the_measured_batch_size_bounds_the_workers_by_dev_shm():
    cal = _cal(device_rate=5000.0, worker_rate=100.0, batch_bytes=64 * MiB)
    rec = sim_rec(cal, cpus=64, shm_free=1 * GiB)
    # half of 1 GiB / (2 batches x 64 MiB) = 4 workers, not the 32 the rate would want
    assert rec.settings.num_workers == 4 and rec.reasons["num_workers"].rule == "tune.R004"
    assert "64.0 MiB" in rec.reasons["num_workers"].text and "(assumed)" not in rec.reasons["num_workers"].text


def test_without_a_calibration_the_rules_are_as_before():
    plain = recommend(make_facts(cpus=2), Request(device=SIM))
    assert plain.settings.num_workers == 1 and plain.reasons["num_workers"].rule == "tune.R003"
    assert plain.chosen_by == "rules" and plain.calibration is None


# ---------------------------------------------------------------------------- tune.C003: a CPU


def _cpu_cal(**kw) -> Calibration:
    return _cal(**{"device": CPU, "device_source": "the CPU's compute at 2 thread(s)", "threads": 2,
                   "worker_threads": 1, **kw})


def test_on_two_cpus_a_worker_is_chosen_only_when_its_trial_beat_loading_in_process():
    faster = recommend(make_facts(cpus=2), Request(device=CPU, calibration=_cpu_cal(in_process_rate=230.0,
                                                                                    worker_rate=317.0)))
    assert faster.settings.num_workers == 1 and faster.settings.threads == 1
    assert "measured 317 (1.38x)" in faster.reasons["num_workers"].text
    same = recommend(make_facts(cpus=2), Request(device=CPU, calibration=_cpu_cal(in_process_rate=300.0,
                                                                                  worker_rate=305.0)))
    assert same.settings.num_workers == 0 and same.settings.threads == 2
    assert same.reasons["num_workers"].rule == "tune.C003"


def test_on_more_cpus_the_model_splits_them_between_loading_and_compute():
    cal = _cpu_cal(loader_rate=200.0, device_rate=1600.0, in_process_rate=178.0, worker_rate=190.0)
    rec = recommend(make_facts(cpus=8), Request(device=CPU, calibration=cal))
    best = max(range(1, 8), key=lambda w: rules.cpu_split_rate(cal, 8, w))
    assert rec.settings.num_workers == best and rec.settings.threads == 8 - best
    assert "predicted" in rec.reasons["num_workers"].text


def test_a_compute_bound_cpu_keeps_every_core_computing():
    cal = _cpu_cal(loader_rate=5000.0, device_rate=200.0, in_process_rate=192.0, worker_rate=None)
    rec = recommend(make_facts(cpus=8), Request(device=CPU, calibration=cal))
    assert rec.settings.num_workers == 0 and rec.settings.threads == 8


# ---------------------------------------------------------------------------- the command line


def test_workload_without_measure_calibrates_and_elsewhere_is_refused(tmp_path):
    from typer.testing import CliRunner

    from debtorch.cli import app

    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(make_facts()))
    got = CliRunner().invoke(app, ["tune", "--facts", str(facts), "--workload", "builtin:cnn"])
    assert got.exit_code == 2
    assert "--facts tunes for another machine by rules; --workload calibrates them on this one" in got.output
    got = CliRunner().invoke(app, ["tune", "--facts", str(facts), "--budget", "30"])
    assert got.exit_code == 2 and "--budget only applies to --measure or --workload" in got.output


@pytest.mark.slow
@pytest.mark.torch
def test_tune_with_a_workload_writes_calibrated_settings(tmp_path):
    out = tmp_path / "cal.toml"
    env = dict(os.environ)   # the session's cache (conftest): the images are written once
    run = subprocess.run([sys.executable, "-m", "debtorch", "tune", "--workload", "builtin:images", "--device",
                          "sim:900", "--budget", "60", "--write", str(out), "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["chosen_by"] == "calibrated" and doc["reasons"]["num_workers"]["rule"] == "tune.C001"
    text = out.read_text()
    assert 'by = "calibrated"' in text and 'workload = "builtin:images"' in text
    assert "# tune.C001: " in text
    assert any(n.startswith("calibrated in ") for n in doc["notes"])


@pytest.mark.slow
@pytest.mark.torch
def test_verify_trains_default_tuned_settings_are_calibrated_on_its_workload(tmp_path):
    env = dict(os.environ)   # the session's cache (conftest): the images are written once
    run = subprocess.run([sys.executable, "-m", "debtorch", "verify-train", "--quick", "--workload", "builtin:images",
                          "--device", "sim:2000", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stderr
    config = json.loads(run.stdout)["config"]
    assert config["source"] == "rules" and config["calibration"]["kind"] == "sim"
    assert config["calibration"]["seconds"] <= 0.1 * 13 + 1.0   # a tenth of --quick's budget, and a trial's end
    assert config["reasons"]["num_workers"].startswith("tune.C001: ")
    assert "verify-train: calibrating: w0 " in run.stderr
