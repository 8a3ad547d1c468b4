"""The runtime API: a config applied to real PyTorch objects, and the example script."""

import os
import subprocess
import sys
import warnings

import pytest
from clitools import ROOT, at_once, run_debtorch
from tune_facts import make_facts

from debtorch import fingerprint
from debtorch.tune import config, runtime
from debtorch.tune.rules import Request, recommend

pytestmark = pytest.mark.torch

EXAMPLE = ROOT / "docs" / "examples" / "train_with_debtorch.py"


def write(tmp_path, doc=None, request=None, fp=None, device=None, **changes):
    doc = doc or make_facts(cpus=2, features={"avx512_bf16": True}, torch_cuda=None, torch="2.13.0+cpu")
    rec = recommend(doc, request or Request(device=device))
    if changes:
        rec.settings = rec.settings.replace(**changes)
    path = tmp_path / "debtorch.toml"
    config.write_config(str(path), rec, fp if fp is not None else {}, config.tuned_table("rules", rec.device),
                        force=True)
    return str(path)


@pytest.fixture(autouse=True, scope="module")
def _torch():
    """torch, imported when the first test of this file runs (never at collection)."""
    global torch
    import torch


@pytest.fixture(autouse=True)
def fresh_warning_state(monkeypatch):
    monkeypatch.setattr(runtime, "_warned", False)
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_loader_kwargs_build_a_working_dataloader(tmp_path):
    cfg = runtime.load(write(tmp_path, num_workers=1, prefetch_factor=3, persistent_workers=True,
                             start_method="fork", micro_batch=8), warn_on_mismatch=False)
    kw = cfg.loader_kwargs(batch_size=32, drop_last=True)
    assert kw == {"batch_size": 8, "drop_last": True, "num_workers": 1, "pin_memory": False, "prefetch_factor": 3,
                  "persistent_workers": True, "multiprocessing_context": "fork"}
    ds = torch.utils.data.TensorDataset(torch.arange(32.0))
    batches = list(torch.utils.data.DataLoader(ds, **kw))
    assert len(batches) == 4 and batches[0][0].shape == (8,)


def test_without_workers_the_worker_only_arguments_are_dropped(tmp_path):
    cfg = runtime.load(write(tmp_path), warn_on_mismatch=False)
    kw = cfg.loader_kwargs(batch_size=16, prefetch_factor=4, persistent_workers=True)
    assert kw == {"batch_size": 16, "num_workers": 0, "pin_memory": False}
    torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4)), **kw)  # DataLoader accepts it


def test_autocast_follows_the_precision(tmp_path):
    a = torch.randn(4, 4)
    cfg = runtime.load(write(tmp_path, precision="bf16"), warn_on_mismatch=False)
    with cfg.autocast("cpu"):
        assert (a @ a).dtype == torch.bfloat16
    cfg = runtime.load(write(tmp_path, precision="fp32"), warn_on_mismatch=False)
    with cfg.autocast(torch.device("cpu")):
        assert (a @ a).dtype == torch.float32


def test_scaler_is_a_no_op_unless_fp16(tmp_path):
    loss = torch.tensor(2.0, requires_grad=True)
    cfg = runtime.load(write(tmp_path, precision="bf16"), warn_on_mismatch=False)
    scaler = cfg.scaler("cpu")
    assert not scaler.is_enabled() and scaler.scale(loss) is loss
    cfg = runtime.load(write(tmp_path, precision="fp16"), warn_on_mismatch=False)
    assert cfg.scaler("cpu").is_enabled()


def test_configure_torch_sets_threads_and_kernels(tmp_path):
    cfg = runtime.load(write(tmp_path, threads=1, tf32=False, cudnn_benchmark=True), warn_on_mismatch=False)
    done = cfg.configure_torch()
    assert done == {"tf32": False, "cudnn_benchmark": True, "threads": 1}
    assert torch.get_num_threads() == 1 and torch.backends.cudnn.benchmark is True
    assert torch.get_float32_matmul_precision() == "highest"
    torch.backends.cudnn.benchmark = False


def test_onecycle_scheduler_over_the_files_run_length(tmp_path):
    cfg = runtime.load(write(tmp_path, request=Request(steps=100)), warn_on_mismatch=False)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = cfg.scheduler(opt)
    assert isinstance(sched, torch.optim.lr_scheduler.OneCycleLR) and sched.total_steps == 100
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / 25)  # OneCycleLR starts at max_lr / 25
    epochs = runtime.load(write(tmp_path, request=Request(epochs=3)), warn_on_mismatch=False)
    assert epochs.scheduler(opt, steps_per_epoch=10).total_steps == 30
    with pytest.raises(ValueError, match="OneCycleLR needs the run's length"):
        epochs.scheduler(opt)


def test_constant_schedule_keeps_the_learning_rate(tmp_path):
    cfg = runtime.load(write(tmp_path), warn_on_mismatch=False)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = cfg.scheduler(opt)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.1


def test_model_and_inputs_channels_last_and_fused_optimizer(tmp_path):
    cfg = runtime.load(write(tmp_path, channels_last=True, fused_optimizer=True), warn_on_mismatch=False)
    model = cfg.prepare_model(torch.nn.Conv2d(3, 4, 3))
    assert model.weight.is_contiguous(memory_format=torch.channels_last)
    x = cfg.to_device(torch.randn(2, 3, 8, 8), "cpu")
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert cfg.to_device(torch.randn(2, 3), "cpu").dim() == 2
    opt = torch.optim.AdamW(model.parameters(), **cfg.optimizer_kwargs())
    assert opt.defaults["fused"] is True
    model(x).sum().backward()
    opt.step()


def test_another_machines_config_warns_once_naming_what_differs(tmp_path):
    other = {"usable_cpus": 64, "torch": "2.5.1+cu124", "gpus": ["NVIDIA H100 80GB HBM3"] * 8}
    path = write(tmp_path, fp=other)
    here = fingerprint.current(torch)
    with pytest.warns(runtime.FingerprintWarning) as record:
        runtime.load(path)
    message = str(record[0].message)
    assert f"usable_cpus 64 -> {here['usable_cpus']}" in message
    assert f"torch 2.5.1+cu124 -> {torch.__version__}" in message
    assert record[0].filename == __file__  # points at the caller's line, not debtorch's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.load(path)  # once per process


def test_this_machines_config_does_not_warn(tmp_path):
    from debtorch import facts
    from debtorch.host import LiveHost

    doc = facts.collect(LiveHost(), facts.Options(python=sys.executable))
    path = write(tmp_path, doc=doc, fp=fingerprint.from_facts(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import debtorch

        cfg = debtorch.load(path)
    assert cfg.fingerprint["torch"] == torch.__version__


def test_importing_debtorch_and_tune_does_not_import_torch():
    code = ("import sys, debtorch, debtorch.cli, debtorch.tune.rules, debtorch.tune.config, "
            "debtorch.tune.search, debtorch.tune.measure; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False", out.stderr


def run_example(config_path, *args):
    return subprocess.run([sys.executable, str(EXAMPLE), "--config", config_path, *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The example script trained with a config the CLI wrote and with one using workers, accumulation
    and OneCycle, both at once: name -> (what writing the config gave, what the script gave)."""
    def cli():
        path = tmp_path_factory.mktemp("example") / "debtorch.toml"
        res = run_debtorch("tune", "--write", str(path), "--steps", "6", "--python", sys.executable)
        return res, run_example(str(path), "--steps", "6") if res.returncode == 0 else None

    def workers():
        path = write(tmp_path_factory.mktemp("example"), request=Request(global_batch=32, micro_batch=16, steps=4),
                     num_workers=1, prefetch_factor=2, persistent_workers=True, start_method="fork",
                     channels_last=True)
        return None, run_example(path, "--steps", "4")

    return at_once({"cli": cli, "workers": workers})


@pytest.mark.slow
def test_example_script_trains_with_a_config_written_by_the_cli(examples):
    res, out = examples["cli"]
    assert res.returncode == 0, res.stderr
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("trained 6 steps")
    assert "FingerprintWarning" not in out.stderr
    assert "watch (left early): 5 steps" in out.stderr   # cfg.watch's verdict: too few steps to judge
    assert "\nwatch.I002 not resolved: 5 steps make fewer than 2 windows" in out.stderr


@pytest.mark.slow
def test_example_script_with_workers_accumulation_and_onecycle(examples):
    _, out = examples["workers"]
    assert out.returncode == 0, out.stderr
    assert "trained 4 steps (w1 pf2" in out.stdout


# -- measured equals applied -------------------------------------------------------


STATE_SETTINGS = [dict(tf32=tf32, cudnn_benchmark=bench, threads=threads)
                  for tf32 in (False, True) for bench in (False, True) for threads in (None, 1, 2)]


@pytest.mark.parametrize("changes", STATE_SETTINGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_engine_measures_with_the_torch_state_that_load_applies(tmp_path, changes, device):
    """What a trial runs under is what debtorch.load().configure_torch() sets, for every setting
    (with tf32 = false the runtime turned cuDNN's TF32 off while the engine left it on)."""
    from debtorch.train import apply, engine
    from debtorch.train.settings import Settings

    saved = apply.state(torch)
    settings = Settings(**changes)
    try:
        with engine._torch_state(settings, torch.device(device), []):
            measured = apply.state(torch)
        assert apply.state(torch) == saved  # a trial leaves the process as it found it
        cfg = runtime.load(write(tmp_path, **changes), warn_on_mismatch=False)
        cfg.configure_torch()
        applied = apply.state(torch)
    finally:
        apply.restore(torch, saved)
    assert measured == applied
    assert applied["cudnn_tf32"] is applied["matmul_tf32"] is changes["tf32"]
    assert applied["cudnn_benchmark"] is changes["cudnn_benchmark"]
    assert applied["threads"] == (changes["threads"] or saved["threads"])


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_engine_trains_the_model_and_inputs_as_load_prepares_them(tmp_path, precision, channels_last):
    """Precision (the autocast dtype in the forward pass) and memory format (of the weights and the
    4-D inputs) are the same in a trial and in a script that adopts the config."""
    from debtorch.train import apply, engine
    from debtorch.train.settings import Settings
    from debtorch.train.workloads import coerce

    seen = {}

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            seen.update(dtype=y.dtype, weight_cl=self.conv.weight.is_contiguous(memory_format=torch.channels_last),
                        input_cl=x.is_contiguous(memory_format=torch.channels_last))
            return y.float().mean(dim=(2, 3))

    data = [(torch.randn(3, 8, 8), torch.tensor(1)) for _ in range(8)]
    wl = coerce({"model": Probe(), "dataset": data, "loss_fn": torch.nn.functional.cross_entropy, "batch_size": 4,
                 "convolutional": True}, "probe")
    settings = Settings(precision=precision, channels_last=channels_last)
    engine.run_trial(wl, settings, steps=1, warmup_steps=0, sample_memory=False)
    in_trial = dict(seen)
    cfg = runtime.load(write(tmp_path, precision=precision, channels_last=channels_last), warn_on_mismatch=False)
    model = cfg.prepare_model(Probe())
    with cfg.autocast("cpu"):
        model(cfg.to_device(torch.randn(4, 3, 8, 8), "cpu"))
    assert seen == in_trial
    assert in_trial["dtype"] == {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert in_trial["weight_cl"] is in_trial["input_cl"] is channels_last
    assert apply.device_type(torch.device("cuda", 1)) == "cuda" and apply.device_type(None) == "cpu"


@pytest.mark.parametrize("written", ["device", "simulated"])
def test_a_config_tuned_on_a_simulated_device_gives_a_device_torch_takes(tmp_path, written):
    """Tuned on sim:800 (an older config holds the spec as its device): cfg.device is the GPU it stands
    for, which autocast, scaler and to_device hand to torch (issue 34, item 2)."""
    from debtorch.cli.shared import parse_device

    spec = str(parse_device("sim:800"))
    path = write(tmp_path, precision="bf16")
    text = open(path).read().replace('device = "cpu"', f'device = "{spec}"' if written == "device"
                                     else f'device = "cuda"\nsimulated = "{spec}"')
    open(path, "w").write(text)
    cfg = runtime.load(path, warn_on_mismatch=False)
    assert cfg.device == "cuda" and cfg.simulated == spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "CUDA is not available": autocast and the scaler turn themselves off
        with cfg.autocast():
            pass
        scaler = cfg.scaler()
    assert not scaler.is_enabled()
    x = torch.ones(2, 3)
    if torch.cuda.is_available():
        assert cfg.to_device(x, cfg.device).device.type == "cuda"
    else:   # torch itself says there is no GPU here: the device reached it as a device
        with pytest.raises((RuntimeError, AssertionError), match="CUDA"):
            cfg.to_device(x, cfg.device)
