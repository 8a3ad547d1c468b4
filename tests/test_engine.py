"""The training-step engine, in process (needs torch)."""

import math
import os
import sys
from pathlib import Path

import pytest

from debtorch.train.settings import Settings
from debtorch.train.worker import classify

pytestmark = pytest.mark.torch
sys.path.insert(0, str(Path(__file__).parent / "workloads"))


@pytest.fixture(autouse=True, scope="module")
def _torch_side():
    """torch, the engine and the test workloads, imported when the first test of this file runs:
    collecting it (the fast tier, a machine without torch) imports nothing of torch."""
    global torch, tiny, engine, TrialError, run_trial, time_to_target, Workload, WorkloadError, coerce, load_workload
    import tiny
    import torch

    from debtorch.train import engine
    from debtorch.train.engine import TrialError, run_trial, time_to_target
    from debtorch.train.workloads import Workload, WorkloadError, coerce, load_workload


def small(spec):
    opts = {"builtin:cnn": {"samples": 256, "size": 32, "width": 16},
            "builtin:transformer": {"samples": 256, "length": 32, "dim": 64}}[spec]
    return load_workload(spec, opts)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["builtin:cnn", "builtin:transformer"])
def test_loss_falls_on_builtin_workloads(spec):
    res = run_trial(small(spec), Settings(), steps=12, warmup_steps=2, sample_memory=False)
    first, last = res.losses[:3], res.losses[-3:]
    assert sum(last) / 3 < sum(first) / 3 - 0.1, res.losses
    assert res.nonfinite_loss_step is None


def test_builtin_workloads_are_deterministic_by_seed():
    a, b = load_workload("builtin:cnn", {"samples": 64, "size": 32}), load_workload("builtin:cnn", {"samples": 64, "size": 32})
    c = load_workload("builtin:cnn", {"samples": 64, "size": 32, "seed": 1})
    assert torch.equal(a.dataset[5][0], b.dataset[5][0])
    assert not torch.equal(a.dataset[5][0], c.dataset[5][0])
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))


def _recording_workload(seen):
    wl = coerce(tiny.make(), "tiny:make")

    def loss_fn(out, target):
        seen.append(out.dtype)
        return torch.nn.functional.cross_entropy(out, target)

    wl.loss_fn = loss_fn
    return wl


@pytest.mark.slow
@pytest.mark.parametrize("precision,dtype", [("bf16", "bfloat16"), ("fp32", "float32")])
def test_precision_reaches_the_forward_pass_on_cpu(precision, dtype):
    seen = []
    res = run_trial(_recording_workload(seen), Settings(precision=precision), steps=3, warmup_steps=1,
                    sample_memory=False)
    assert set(seen) == {getattr(torch, dtype)}
    assert all(math.isfinite(x) for x in res.losses)


@pytest.mark.slow
def test_fp16_runs_with_a_scaler_on_cpu():
    res = run_trial(coerce(tiny.make(), "t"), Settings(precision="fp16"), steps=3, warmup_steps=1, sample_memory=False)
    assert all(math.isfinite(x) for x in res.losses)


@pytest.mark.slow
def test_data_wait_and_compute_add_up_to_the_step_time():
    # Each item sleeps 4 ms and a micro-batch is 4 items: at least 16 ms of waiting per micro-batch.
    wl = coerce(tiny.make(delay=0.004, batch_size=4), "tiny:make")
    res = run_trial(wl, Settings(accumulation_steps=2), steps=4, warmup_steps=1)
    for step, data, compute in zip(res.step_s, res.data_wait_s, res.compute_s):
        assert data + compute == pytest.approx(step, rel=1e-9, abs=1e-9)
        assert data >= 2 * 4 * 0.004
        assert compute > 0
    assert sum(res.step_s) + res.overhead_s == pytest.approx(res.wall_s)
    assert res.data_wait_share == pytest.approx(sum(res.data_wait_s) / res.wall_s)
    assert res.samples == 4 * 2 * 4
    assert res.peak_host_bytes > 0


@pytest.mark.slow
def test_compute_only_takes_batches_from_memory():
    wl = coerce(tiny.make(delay=0.004, batch_size=4), "tiny:make")
    res = run_trial(wl, Settings(), steps=4, warmup_steps=1, compute_only=True, sample_memory=False)
    assert res.mode == "compute_only"
    assert all(d < 4 * 0.004 for d in res.data_wait_s)


@pytest.mark.slow
def test_bare_and_instrumented_loops_train_on_the_same_samples():
    wl = small("builtin:cnn")
    s = Settings(num_workers=1)
    inst = run_trial(wl, s, steps=4, warmup_steps=1, seed=3)
    bare = run_trial(wl, s, steps=4, warmup_steps=1, seed=3, instrument=False)
    other = run_trial(wl, s, steps=4, warmup_steps=1, seed=4, instrument=False)
    assert bare.mode == "bare" and bare.step_s is None and bare.peak_host_bytes is None
    assert inst.sample_digest == bare.sample_digest != other.sample_digest
    assert inst.losses == pytest.approx(bare.losses, rel=1e-5)


@pytest.mark.slow
def test_trials_restore_threads_and_start_from_the_same_weights():
    wl = coerce(tiny.make(), "tiny:make")
    before = torch.get_num_threads()
    a = run_trial(wl, Settings(threads=1), steps=3, warmup_steps=0, sample_memory=False)
    b = run_trial(wl, Settings(threads=1), steps=3, warmup_steps=0, sample_memory=False)
    assert a.threads == 1 and torch.get_num_threads() == before
    assert a.losses == b.losses


@pytest.mark.slow
def test_accumulation_onecycle_and_ignored_settings_are_reported():
    wl = coerce(tiny.make(), "tiny:make")
    res = run_trial(wl, Settings(accumulation_steps=3, micro_batch=8, lr_schedule="onecycle", max_lr=0.01,
                                 channels_last=True, pin_memory=True),
                    steps=2, warmup_steps=1, sample_memory=False)
    assert res.samples_per_step == 24 and res.samples == 48
    assert any("channels_last" in n for n in res.notes)
    assert any("pin_memory" in n for n in res.notes)


def test_bad_settings_are_one_line():
    with pytest.raises(TrialError, match="prefetch_factor needs num_workers > 0"):
        run_trial(coerce(tiny.make(), "t"), Settings(prefetch_factor=2), steps=1)


@pytest.mark.slow
def test_profile_writes_a_chrome_trace(tmp_path):
    res = run_trial(coerce(tiny.make(), "t"), Settings(), steps=3, warmup_steps=1, profile_dir=str(tmp_path))
    trace = Path(res.profile_trace)
    assert trace.exists() and '"traceEvents"' in trace.read_text()[:200000]


def test_time_to_target_uses_a_running_mean():
    assert time_to_target(None, [], [1.0], [1.0]).step is None
    # A single low loss does not count; five in a row below 1.0 do.
    losses = [2.0, 0.1, 2.0, 2.0, 2.0, 0.9, 0.9, 0.9, 0.9, 0.9]
    out = time_to_target(1.0, losses[:2], losses[2:], [0.5] * 8)
    assert out.step == 10
    assert out.seconds == pytest.approx(10 * 0.5)
    assert time_to_target(0.5, [], losses, [1.0] * 10).step is None


# -- workload validation -----------------------------------------------------------

@pytest.mark.parametrize("made,message", [   # made(torch.nn): what the workload function returned
    (lambda nn: [1, 2], "x:make returned a list; expected a Workload or dict with model, dataset, loss_fn, batch_size"),
    (lambda nn: {"model": 1}, "x:make returned a dict without dataset, loss_fn, batch_size"),
    (lambda nn: {"model": None, "dataset": [], "loss_fn": len, "batch_size": 1, "extra": 1}, "unknown key 'extra'"),
    (lambda nn: {"model": "m", "dataset": [1], "loss_fn": len, "batch_size": 1}, "model is a str; expected a torch.nn.Module"),
    (lambda nn: {"model": nn.ReLU(), "dataset": [1], "loss_fn": len, "batch_size": 1}, "model has no trainable parameters"),
    (lambda nn: {"model": nn.Linear(1, 1), "dataset": 5, "loss_fn": len, "batch_size": 1}, "dataset is an int; expected a map-style"),
    (lambda nn: {"model": nn.Linear(1, 1), "dataset": [1], "loss_fn": 3, "batch_size": 1}, "loss_fn is an int"),
    (lambda nn: {"model": nn.Linear(1, 1), "dataset": [1], "loss_fn": len, "batch_size": 0}, "batch_size is 0"),
    (lambda nn: {"model": nn.Linear(1, 1), "dataset": [1], "loss_fn": len, "batch_size": 2}, "fewer than one batch of 2"),
])
def test_a_workload_of_the_wrong_shape_is_named(made, message):
    with pytest.raises(WorkloadError) as info:
        coerce(made(torch.nn), "x:make")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_workload_specs_are_checked():
    for spec, msg in [("nocolon", "must be module:function"), ("builtin:nope", "no built-in workload 'nope'"),
                      ("tiny:absent", "tiny has no function absent"), ("no_such_module_x:make", "cannot import no_such_module_x")]:
        with pytest.raises(WorkloadError, match=msg):
            load_workload(spec)
    assert isinstance(load_workload("tiny:make"), Workload)


# -- failures as findings ----------------------------------------------------------

def test_out_of_memory_names_the_batch_and_what_fits():
    err = classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                   {"micro_batch": 256, "accumulation_steps": 2, "device": "cuda:0"})
    assert err["kind"] == "oom"
    assert err["message"] == "cuda:0 ran out of memory at micro-batch 256; try micro_batch 128 with accumulation_steps 4"
    assert err["suggestion"] == {"micro_batch": 128, "accumulation_steps": 4}


def test_a_bus_error_in_a_dataloader_worker_points_at_dev_shm():
    text = ("DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's "
            "workers are out of shared memory. Please try to raise your shared memory limit.")
    err = classify(RuntimeError(text), {"num_workers": 4})
    assert err["kind"] == "shm" and err["finding"] == "memory.E001"
    assert "/dev/shm is too small for 4 DataLoader workers" in err["message"]


def test_other_errors_keep_type_and_first_line():
    try:
        raise ValueError("shapes do not match\nmore detail")
    except ValueError as exc:
        err = classify(exc)
    assert err["kind"] == "exception" and err["message"] == "ValueError: shapes do not match"
    assert "Traceback" in err["traceback"]


@pytest.mark.slow
def test_dataloader_workers_memory_is_counted():
    wl = coerce(tiny.make(), "tiny:make")
    alone = run_trial(wl, Settings(), steps=2, warmup_steps=1).peak_host_bytes
    with_workers = run_trial(wl, Settings(num_workers=2), steps=2, warmup_steps=1).peak_host_bytes
    assert with_workers > alone


def test_gpu_utilisation_is_sampled_only_in_the_timed_window():
    class FakeNvml:  # stands in for pynvml on machines without a GPU
        @staticmethod
        def nvmlDeviceGetUtilizationRates(handle):
            assert handle == "gpu0"
            return type("Util", (), {"gpu": 87})()

    gauges = engine._Gauges(FakeNvml(), "gpu0")
    gauges.between_steps(force=True)
    assert gauges.util == [] and gauges.peak_host() > 0
    gauges.timing = True
    gauges.between_steps(force=True)
    assert gauges.util == [87.0]


@pytest.mark.slow
def test_peak_host_memory_sees_inside_the_step_and_is_per_trial():
    spiky = coerce(dict(tiny.make(), model=tiny.Transient()), "spiky")
    calm = coerce(tiny.make(), "calm")
    high = run_trial(spiky, Settings(), steps=2, warmup_steps=0).peak_host_bytes
    low = run_trial(calm, Settings(), steps=2, warmup_steps=0).peak_host_bytes
    assert high - low > 200 * 2**20


@pytest.mark.slow
def test_cuda_only_settings_are_noted_on_cpu():
    res = run_trial(coerce(tiny.make(), "t"), Settings(tf32=True, cudnn_benchmark=True), steps=1, warmup_steps=0,
                    sample_memory=False)
    assert any("tf32" in n for n in res.notes) and any("cudnn_benchmark" in n for n in res.notes)


@pytest.mark.slow
def test_torch_compile_trains():
    res = run_trial(coerce(tiny.make(), "t"), Settings(compile=True), steps=3, warmup_steps=1, sample_memory=False)
    assert all(math.isfinite(x) for x in res.losses) and res.losses[-1] < res.warmup_losses[0]


# -- builtin:images: JPEG files decoded from disk ------------------------------------------------


@pytest.mark.slow
def test_images_are_written_once_and_decoded_from_disk_the_same_in_every_process(tmp_path, monkeypatch):
    pytest.importorskip("PIL")
    monkeypatch.setenv("DEBTORCH_CACHE", str(tmp_path))
    opts = {"samples": 24, "size": 16, "raw": 40, "width": 8, "batch_size": 8}
    wl = load_workload("builtin:images", opts)
    folder = wl.dataset.folder
    assert folder.startswith(str(tmp_path)) and sorted(os.listdir(folder))[:2] == ["000000.jpg", "000001.jpg"]
    assert len(os.listdir(folder)) == 24 and not [p for p in os.listdir(tmp_path) if p.startswith(".writing-")]
    stamp = os.stat(wl.dataset.path(0)).st_mtime_ns
    again = load_workload("builtin:images", opts)  # the cache is reused, not written again
    assert os.stat(again.dataset.path(0)).st_mtime_ns == stamp
    x, y = wl.dataset[3]
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32 and torch.equal(x, again.dataset[3][0])
    assert not torch.equal(x, wl.dataset[4][0])
    # DataLoader workers decode the same items as the training process.
    # (With workers a trial settles their prefetch queue for 8 untimed steps first: the trial
    # without them warms up as long.)
    one = run_trial(again, Settings(), steps=8, warmup_steps=9, sample_memory=False)
    two = run_trial(again, Settings(num_workers=2, prefetch_factor=2), steps=8, warmup_steps=1,
                    sample_memory=False)
    assert two.settle_steps == 8
    assert one.sample_digest == two.sample_digest and one.losses == pytest.approx(two.losses, rel=1e-4)
    # Decoding happens in __getitem__, from the file: removing one breaks that item.
    os.remove(wl.dataset.path(5))
    with pytest.raises(FileNotFoundError):
        wl.dataset[5]


def test_images_without_pillow_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("DEBTORCH_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(WorkloadError, match=r"^builtin:images needs Pillow in .+: pip install pillow "
                                            r"\(or debtorch\[torch\]\)$"):
        load_workload("builtin:images", {"samples": 8, "raw": 32, "batch_size": 4})
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_full_prefetch_queue_is_not_read_as_loader_speed():
    # Each sample takes 5 ms to load: 2 workers can give at most 2 * 4 / 0.020 = 400 samples/s,
    # however fast the model is.  The queue (2 workers x prefetch 4 = 8 batches) is full when the
    # timed window starts; timing 3 steps of it would read thousands of samples/s.
    made = tiny.make(delay=0.005, n=256, batch_size=4)
    made["model"] = tiny.SlowFirstStep()
    wl = coerce(made, "tiny:slow_first")
    s = Settings(num_workers=2, prefetch_factor=4)
    assert engine.settle_steps(s) == 16 and engine.settle_steps(Settings()) == 0
    assert engine.settle_steps(Settings(num_workers=2, prefetch_factor=4, accumulation_steps=4)) == 4
    r = run_trial(wl, s, steps=3, warmup_steps=1, sample_memory=False)
    assert r.settle_steps == 16 and r.steps == 16 and r.steps_requested == 16
    assert r.samples_per_s < 1.5 * 400, r.samples_per_s   # a bound a busy machine only lowers
