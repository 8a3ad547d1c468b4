"""The simulated accelerator (debtorch/train/sim.py, docs/engine.md): its spec, its arithmetic on a
fake clock, and tiny simulated jobs whose loaders sleep (no CPU: robust on a busy machine) against
the model's numbers.  Rates are far apart and every bound is 10%."""

import dataclasses
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from debtorch.train import sim
from debtorch.train.device import Device

DEFAULTS = {"launch_ms": 1.0, "gbps": 25.0, "ahead": 3}


def test_a_spec_round_trips_and_names_its_preset():
    spec = sim.parse("sim:a100-resnet50,ahead=2", DEFAULTS, {"a100-resnet50": 2470})
    assert spec.text() == "sim:2470,launch=1,gbps=25,ahead=2,sync=0,name=a100-resnet50"
    assert sim.parse(spec.text()) == spec
    assert spec.words() == "simulated accelerator (2470 samples/s, a100-resnet50)"


@pytest.mark.parametrize("text, says", [
    ("sim:0", "RATE must be a number from 0.01"), ("sim:fast", "presets: a100"), ("sim:100,ahead=0", "ahead must"),
    ("sim:100,gbps=-1", "gbps must"), ("sim:100,colour=red", "unknown or bad parameter 'colour=red'"),
    ("cuda", "a simulated device is sim:RATE"), ("sim:100", None)])
def test_bad_specs_are_one_line(says, text):
    if says is None:  # without defaults: the worker refuses an incomplete spec rather than guess
        with pytest.raises(ValueError, match="no value for launch_ms, gbps, ahead"):
            sim.parse(text)
        return
    with pytest.raises(ValueError, match=says):
        sim.parse(text, DEFAULTS, {"a100": 2470})


@given(st.text(max_size=40))
def test_arbitrary_specs_parse_or_raise_value_error(text):
    for t in (text, "sim:" + text):
        try:
            spec = sim.parse(t, DEFAULTS, {"a100": 2470})
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            assert spec.rate > 0 and sim.parse(spec.text()) == spec


class FakeClock:
    """Time that passes only when the host sleeps (a microsecond per read, so a launch's spin ends)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1e-6
        return self.t

    def sleep(self, s):
        self.t += s


def fake_rate(fetch_s, device_s, ahead=3, sync=False, steps=400, launch_ms=0.0):
    """Samples/s of 10-sample steps whose host fetches take ``fetch_s`` (cycled), on the model."""
    clock = FakeClock()
    d = sim.SimDevice(sim.SimSpec(rate=10 / device_s, launch_ms=launch_ms, gbps=25, ahead=ahead),
                      clock=clock, sleep=clock.sleep)
    for i in range(steps):
        if i == steps // 4:
            d.drain()
            start = clock.t
        clock.sleep(fetch_s[i % len(fetch_s)])
        d.compute(10)
        d.end_step(sync)
    d.drain()
    return 10 * (steps - steps // 4) / (clock.t - start)


def test_the_model_on_a_fake_clock():
    assert fake_rate([0.010], 0.040) == pytest.approx(250, rel=0.01)          # the device's rate
    assert fake_rate([0.040], 0.010) == pytest.approx(250, rel=0.01)          # the loader's
    assert fake_rate([0.010], 0.040, sync=True) == pytest.approx(200, rel=0.01)  # fetch + device, in turn
    # A launch overlaps its own device work: 5 ms of launching and 40 ms of work take 40 ms.
    assert fake_rate([0.0], 0.040, sync=True, launch_ms=5) == pytest.approx(250, rel=0.01)
    # Bursts: one fetch in four takes 90 ms, the others 5; 30 ms of device work a step.  Two steps
    # queued (ahead=1) cover 60 ms of the burst: the device idles 30 ms in every 150.
    assert fake_rate([0.090, 0.005, 0.005, 0.005], 0.030, ahead=1) == pytest.approx(40 / 0.150, rel=0.01)
    assert fake_rate([0.090, 0.005, 0.005, 0.005], 0.030, ahead=2) == pytest.approx(10 / 0.030, rel=0.01)


def test_a_host_that_wakes_late_after_a_drain_is_counted_and_the_model_adds_it():
    from debtorch.verify.analysis import predicted_sync_cost

    class LateClock(FakeClock):
        def sleep(self, s):
            self.t += s + 0.0005          # every wait overshoots by half a millisecond, as a timer does

    clock = LateClock()
    d = sim.SimDevice(sim.SimSpec(rate=100, launch_ms=0, gbps=25, ahead=3), clock=clock, sleep=clock.sleep)
    for _ in range(4):
        d.compute(1)                       # 10 ms of work
        d.end_step(sync=True)
    assert d.wake == pytest.approx(4 * 0.0005, rel=0.05)
    assert d.waited == pytest.approx(4 * 0.0105, rel=0.05)
    # The same synced step (20 ms: 10 of the host's own, 10 waited of which 0.5 late): the model without the
    # wake-up would forecast a 19.5 ms step and call the measured cost of 20 ms too high.
    nosync = [_trial(32 / 0.012, 0.0, 0.010)]
    synced = _trial(32 / 0.020, 0.0105, 0.010)
    woke_late = dataclasses.replace(synced, sim=dataclasses.replace(synced.sim, wake_s=0.0005))
    assert predicted_sync_cost(nosync, [woke_late], 0.0) == pytest.approx(1 - 0.012 / 0.020, abs=1e-6)
    assert predicted_sync_cost(nosync, [synced], 0.0) == pytest.approx(1 - 0.012 / 0.0195, abs=1e-6)


@pytest.mark.torch
def test_a_blocking_copy_waits_for_the_queue_and_a_pinned_one_does_not():
    import torch
    clock = FakeClock()
    d = sim.SimDevice(sim.SimSpec(rate=100, launch_ms=0, gbps=1, ahead=3), clock=clock, sleep=clock.sleep)
    x = torch.zeros(250_000)          # 1 MB: 1 ms at 1 GB/s
    d.compute(10)                     # 100 ms of work queued
    d.copy(x, pinned=True, non_blocking=True)
    assert clock.t < 0.001 and d.staged == 0 and d.free_at == pytest.approx(0.101, abs=1e-4)
    d.copy(x, pinned=False, non_blocking=False)   # staged on the host, then the stream synchronised
    assert clock.t == pytest.approx(0.102, abs=1e-3) and d.staged > 0


# ---------------------------------------------------------------------------
# Tiny simulated jobs in real time: the loader sleeps once per batch


def engine_trial(test):
    """An engine trial in this process (it trains): torch, and the slow tier."""
    return pytest.mark.slow(pytest.mark.torch(test))


def _job(batch_sleep, n=100_000, item=16, every=0, burst=0.0):
    """A workload whose batches (10 items of ``item`` floats, the same tensors every time: no CPU spent
    making them) cost ``batch_sleep`` s of sleep each (``burst`` every ``every``th batch)."""
    import torch

    from debtorch.train.workloads import Workload

    batch = (torch.zeros(10, item), torch.zeros(10, dtype=torch.long))

    class Sleepy(torch.utils.data.Dataset):
        calls = 0

        def __len__(self):
            return n

        def __getitem__(self, i):
            return i

        def __getitems__(self, indices):
            Sleepy.calls += 1
            time.sleep(burst if every and Sleepy.calls % every == 0 else batch_sleep)
            return indices

    return Workload(model=torch.nn.Linear(item, 2), dataset=Sleepy(), loss_fn=torch.nn.functional.cross_entropy,
                    batch_size=10, collate_fn=lambda items: batch)


def _run(wl, rate, steps=30, sync=False, ahead=3, launch=0.0, gbps=25, **settings):
    from debtorch.train.engine import run_trial
    from debtorch.train.settings import Settings

    r = run_trial(wl, Settings(**settings), device=Device.parse(f"sim:{rate},launch={launch},gbps={gbps},ahead={ahead}"),
                  steps=steps, warmup_steps=3, sync_each_step=sync, sample_memory=False)
    assert r.sim.words == f"simulated accelerator ({rate} samples/s)" and r.losses[0] is None
    return r


PINNED = {"pin_memory": True, "non_blocking": True}


@engine_trial
def test_throughput_is_the_slower_of_loader_and_device():
    # The loader gives 10 samples per 50 ms (200/s); devices of 80/s and of 800/s.
    assert _run(_job(0.050), 80, steps=16, **PINNED).samples_per_s == pytest.approx(80, rel=0.10)
    fed = _run(_job(0.050), 800, **PINNED)
    assert fed.samples_per_s == pytest.approx(200, rel=0.10)
    assert fed.data_wait_share > 0.8 and fed.samples_per_s / 800 < 0.3


@engine_trial
def test_a_per_step_sync_costs_what_the_model_says():
    # 10 ms of fetching and 40 ms of device work a step: overlapped 40 ms (250/s), in turn 50 ms (200/s).
    wl = _job(0.010)
    free, synced = _run(wl, 250, **PINNED), _run(wl, 250, sync=True, **PINNED)
    assert free.samples_per_s == pytest.approx(250, rel=0.10)
    assert synced.samples_per_s == pytest.approx(200, rel=0.10)
    assert synced.sim.device_wait_s == pytest.approx(0.040, rel=0.10)   # the whole step's work, waited for
    from debtorch.verify.analysis import predicted_sync_cost

    predicted = predicted_sync_cost([free], [synced], 0.0)
    assert predicted == pytest.approx(1 - synced.samples_per_s / free.samples_per_s, abs=0.05)


@engine_trial
def test_run_ahead_absorbs_a_slow_loader_burst():
    # One fetch in four sleeps 90 ms, the others 5; 30 ms of device work a step (333 samples/s).  With one
    # step queued beyond the running one the device idles 30 ms in every 150 (267/s); three cover it.
    shallow = _run(_job(0.005, every=4, burst=0.090), 333, steps=40, ahead=1, **PINNED)
    deep = _run(_job(0.005, every=4, burst=0.090), 333, steps=40, ahead=8, **PINNED)
    assert shallow.samples_per_s == pytest.approx(40 / 0.150, rel=0.10)
    assert deep.samples_per_s == pytest.approx(333, rel=0.10)
    assert deep.samples_per_s > 1.1 * shallow.samples_per_s


@engine_trial
def test_pinned_non_blocking_copies_free_the_host():
    # Batches of 10 MB at 0.25 GB/s: 40 ms of copying, 20 ms of compute a step, 30 ms of fetching.
    # Pinned and non-blocking: the device's 60 ms are the step.  Pageable and blocking (PyTorch's
    # defaults): fetch, staging memcpy and the copy in turn, each waiting for the other.
    wl = _job(0.030, item=262_144)
    pinned, pageable = _run(wl, 500, gbps=0.25, **PINNED), _run(wl, 500, gbps=0.25)
    assert pinned.samples_per_s == pytest.approx(10 / 0.062, rel=0.10)
    assert pinned.sim.staging_s == 0 and pageable.sim.staging_s > 0
    fetch = sum(pageable.data_wait_s) / pageable.steps
    assert pageable.samples_per_s == pytest.approx(10 / (fetch + pageable.sim.staging_s + 0.042), rel=0.10)
    assert pinned.samples_per_s > 1.1 * pageable.samples_per_s


@engine_trial
def test_loader_workers_feed_the_device_together():
    # Two workers, each 10 samples per 80 ms: 250 samples/s between them.
    two = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, **PINNED}
    assert _run(_job(0.080), 100, steps=24, **two).samples_per_s == pytest.approx(100, rel=0.10)
    assert _run(_job(0.080), 750, steps=24, **two).samples_per_s == pytest.approx(250, rel=0.10)


# ---------------------------------------------------------------------------
# verify-train on a simulated device: the plan and the report (no torch: made-up trials)

SPEC = Device.parse("sim:300,launch=1,gbps=25,ahead=3,sync=0")


def test_verify_plan_on_a_simulated_device_reads_the_loss_every_step_instead_of_bounds_and_convergence():
    from debtorch.train.result import LoadedWorkload
    from debtorch.train.settings import Settings
    from debtorch.verify.measure import JobKind, Plan, Verifier

    v = Verifier(Plan(device=SPEC, repeats=3, converge_steps=100))
    v.measured.workload = LoadedWorkload(batch_size=32, target_loss=0.5)
    jobs = v.jobs(Settings(), Settings(num_workers=2, prefetch_factor=2, pin_memory=True, non_blocking=True, threads=1))
    assert {j.kind for j in jobs} == {JobKind.PRIME, JobKind.ROUND}   # no bounds, no convergence runs
    assert {j.arm for j in jobs} == {"baseline", "tuned", "tuned_sync", "without loader", "without threads"}
    assert all(j.extra == {"sync_each_step": True} for j in jobs if j.arm == "tuned_sync")


def _trial(sps, wait, busy, steps=20, batch=32, workers=2, data_share=0.1):
    from debtorch.train.result import TrialResult

    wall = steps * batch / sps
    return TrialResult.from_json({
        "samples_per_s": sps, "steps": steps, "wall_s": wall, "step_median_s": wall / steps,
        "data_wait_share": data_share, "data_wait_s": [data_share * wall / steps] * steps,
        "settings": {"num_workers": workers}, "accumulation_steps": 1,
        "sim": {"device_busy_s": busy, "device_wait_s": wait, "staging_s": 0.0}})


def _measured(base, tuned, synced):
    from debtorch.verify.measure import Measured, RunBudget

    m = Measured(device=SPEC)
    m.trials.update(baseline=base, tuned=tuned, tuned_sync=synced)
    m.budget = RunBudget(None, rounds=len(tuned))
    return m


def test_report_states_the_simulated_device_its_bound_and_what_a_per_step_sync_costs():
    from debtorch.report.verify import lines, rows
    from debtorch.verify import analysis

    # A device of 300/s (107 ms per 32-sample step) that tuned keeps busy: 290/s.  Every step synced, the
    # host's own 25 ms (1 of them the launch, which overlaps the device's work) add to the device's 107 ms.
    tuned = [_trial(290 + i, 0.05, 0.1067) for i in range(-2, 3)]
    synced = [_trial(32 / (0.1067 + 0.024) + i, 0.1057, 0.1067) for i in range(-2, 3)]
    base = [_trial(150 + i, 0.0, 0.1067, workers=0, data_share=0.6) for i in range(-2, 3)]
    m = _measured(base, tuned, synced)
    s = analysis.summary(m)
    sd = s.sim
    assert sd.words == "simulated accelerator (300 samples/s)" and sd.input_bound is None
    assert 0.95 < sd.bound_fraction.tuned.value < 0.98
    cost = sd.sync_cost
    assert cost.cost.verdict == "costs" and cost.model == "within"
    assert cost.predicted == pytest.approx(1 - (32 / 290) / (0.1067 + 0.024), abs=0.01)
    text = "\n".join(str(x) for x in lines(m, s))
    assert "per-step sync (the loss read every step, as .item() does): costs" in text
    assert "the model (a drained queue: the synced steps' host time plus the device's and the host's wake-up) gives" in text
    assert "within the interval" in text
    assert ("device bound (simulated)", "300", "300") in rows(m, s)
    v = analysis.verdict(s)
    assert v.startswith("simulated accelerator (300 samples/s): tuned is ") and "of the device" in v


def test_an_input_bound_run_says_the_loaders_ceiling_and_the_cpus_it_would_take():
    from debtorch.report.verify import lines
    from debtorch.verify import analysis

    tuned = [_trial(200 + i, 0.0, 0.1067, data_share=0.3) for i in range(-2, 3)]
    base = [_trial(100 + i, 0.0, 0.1067, workers=0, data_share=0.7) for i in range(-2, 3)]
    m = _measured(base, tuned, [_trial(195 + i, 0.1, 0.1067) for i in range(-2, 3)])
    s = analysis.summary(m)
    assert s.sim.input_bound.to_json() == {"ceiling": 200, "one_process": 100, "cpus": 3}
    text = "\n".join(str(x) for x in lines(m, s))
    assert ("input-bound: the device waits for data; this machine's loader ceiling is 200 samples/s (tuned), one "
            "loading process gives 100 (the baseline, loading in the training process): feeding 300 samples/s takes "
            "about 3 CPUs of loading") in text
    assert analysis.verdict(s).endswith("of the device, input-bound")


def test_an_input_bound_verdict_is_followed_by_what_to_do_next():
    """"feeding 800 samples/s takes about 2 CPUs of loading" on a 2-CPU machine, and nothing after it
    (issue 34, item 7): the next line says more loader CPUs."""
    from debtorch.report.verify import VerifyView
    from debtorch.verify import analysis
    from debtorch.verify.run import Outcome, TunedBy

    tuned = [_trial(200 + i, 0.0, 0.1067, data_share=0.3) for i in range(-2, 3)]
    base = [_trial(100 + i, 0.0, 0.1067, workers=0, data_share=0.7) for i in range(-2, 3)]
    m = _measured(base, tuned, [_trial(195 + i, 0.1, 0.1067) for i in range(-2, 3)])
    s = analysis.summary(m)
    view = VerifyView(Outcome(m, s, analysis.verdict(s), [], TunedBy("rules", {}), {}), 0)
    said = [line.text for line in view.lines()[1:]]
    assert said[-2].startswith("verdict: ")
    assert said[-1] == ("next: this machine's CPUs cannot feed a 300 samples/s device: give the loader more CPUs "
                        "(about 3 of loading); or make each sample cheaper to load (pre-processed or smaller inputs)")
    assert view.document()["next"][0].startswith("this machine's CPUs cannot feed")
