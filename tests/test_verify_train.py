"""debtorch verify-train end to end: the real worker, the real engine, --quick sizes.

Each test runs ``python -m debtorch verify-train`` as a user would, with the
venv's interpreter (which has torch) training.  Skipped where it has no torch;
every test that trains is the slow tier.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import ROOT, at_once, run_debtorch

pytestmark = pytest.mark.torch

WORKLOADS = Path(__file__).parent / "verify_workloads"
TIMEOUT = 600


# --quick's own budget (13 s) holds on a quiet machine; the tests run beside others, so they give
# more.  The rounds stop when the speed-up resolves, after --quick's 5 at most, or at the budget.
BUDGET = "120"


def verify(*args, cwd=None, tmpdir=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    budget = () if "--budget" in args else ("--budget", BUDGET)
    return subprocess.run([sys.executable, "-m", "debtorch", "verify-train", *budget, *args], capture_output=True,
                          text=True, env=env, cwd=cwd or WORKLOADS, timeout=TIMEOUT)


def torch_sees_a_gpu():
    """Asked of this interpreter's torch in a process of its own (this one never imports torch)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() != "False"


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    """The runs that fail (each soon after the worker starts) and torch_sees_a_gpu, run at once:
    name -> result."""
    cfg = tmp_path_factory.mktemp("verify") / "workers.toml"
    cfg.write_text("schema_version = 1\n[loader]\nnum_workers = 1\n[tuned]\nby = \"rules\"\ndevice = \"cpu\"\n")
    runs = {"shm": ("--workload", "vw:shm_full", "--config", str(cfg)), "oom": ("--workload", "vw:oom_above"),
            "import": ("--workload", "vw_broken:make"), "cuda": ("--device", "cuda"),
            "nan": ("--workload", "vw:nan_loss", "--json"), "exit": ("--workload", "vw:exit_while_loading", "--json")}
    calls = {name: (lambda args=args: verify("--quick", *args)) for name, args in runs.items()}
    return at_once({**calls, "gpu": torch_sees_a_gpu})


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory):
    """One --quick run with a tune-written config (edited to look tuned elsewhere), --json, --plot, --profile."""
    tmp = tmp_path_factory.mktemp("verify")
    cfg = tmp / "debtorch.toml"
    res = run_debtorch("tune", "--write", str(cfg))
    assert res.returncode == 0, res.stderr
    text = cfg.read_text()
    assert re.search(r'(?m)^cpu_model = ".*"$', text)
    cfg.write_text(re.sub(r'(?m)^cpu_model = ".*"$', 'cpu_model = "AMD EPYC 9654 96-Core Processor"', text))
    plot, prof = tmp / "verify.png", tmp / "prof"
    res = verify("--quick", "--json", "--config", str(cfg), "--plot", str(plot), "--profile", str(prof))
    return res, cfg, plot, prof


@pytest.mark.slow
def test_quick_run_prints_the_table_and_the_verdict():
    # A user's module:function whose steps take a millisecond (the built-in default's --quick run is
    # quick_json's): what is judged here is the report's text, not the workload.
    res = verify("--quick", "--workload", "vw:points")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for row in ("samples/s (min-max)", "speed-up", "waiting for data", "computing", "compute-only bound",
                "peak host memory", "time to loss"):
        assert row in out
    # Quick rounds on a shared machine may not resolve the speed-up: then it says so, and what would.
    assert re.search(r"(?m)^verdict: (tuned is \d+\.\d\dx baseline \(\d+\.\d\d-\d+\.\d\d\)|speed-up inconclusive "
                     r"\(tuned/baseline \d+\.\d\d-\d+\.\d\d over [345] rounds; .+\)), data wait ", out)
    assert "instrumentation: the per-step clocks and gauges cost" in out
    assert re.search(r"(?m)^rounds: [345] interleaved \(stopped: ", out)
    assert "attribution: not measured (--quick)" in out
    assert "Traceback" not in res.stderr
    # Progress goes to stderr, never into the report.
    assert "round 3: tuned" in res.stderr and "round 1: " not in out


@pytest.mark.slow
def test_json_has_everything_and_uses_the_config(quick_json):
    res, cfg, _, _ = quick_json
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    for key in ("schema_version", "verdict", "summary", "plan", "settings", "config", "trials", "converge",
                "facts", "worker", "workload", "exit_code"):
        assert key in doc
    assert doc["exit_code"] == 0 and doc["plan"]["quick"] is True
    s = doc["summary"]
    for arm in ("baseline", "tuned", "tuned_bare", "baseline_bound", "tuned_bound"):
        assert s[arm]["runs"] == s["rounds"] >= 3, arm
    assert doc["budget"]["budget_s"] == 120 and doc["budget"]["spent_s"] <= 120
    assert s["speedup"]["ratio"] > 0 and s["instrumentation"]["cost"] is not None
    assert 0 < s["bound_fraction"]["tuned"]["share"]
    assert s["convergence"]["target_loss"] == doc["workload"]["target_loss"]
    # The tuned settings are the config's, loaded with tune's loader.
    from debtorch.tune.config import load_config

    assert doc["settings"]["tuned"] == load_config(str(cfg)).settings.to_dict()
    assert doc["config"]["source"] == "config"
    assert doc["facts"]["cpu"]["usable_cpus"] >= 1
    # Baseline is PyTorch's defaults.
    assert doc["settings"]["baseline"]["num_workers"] == 0 and doc["settings"]["baseline"]["precision"] == "fp32"


@pytest.mark.slow
def test_a_config_tuned_on_another_machine_is_named(quick_json):
    res, cfg, _, _ = quick_json
    assert f"warning: {cfg} was tuned on another machine or environment: cpu_model AMD EPYC 9654" in res.stderr
    assert json.loads(res.stdout)["config"]["stale"]


@pytest.mark.slow
def test_plot_writes_a_png(quick_json):
    pytest.importorskip("matplotlib")
    _, _, plot, _ = quick_json
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_profile_writes_a_chrome_trace_with_the_step_breakdown(quick_json):
    res, _, _, prof = quick_json
    trace = json.loads((prof / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"data_wait", "compute"} <= names
    assert json.loads(res.stdout)["profile"]["trace"] == str(prof / "trace.json")


@pytest.mark.slow
def test_two_processes_on_cpu_report_scaling(tmp_path):
    res = verify("--quick", "--json", "--nproc", "2", "--max-steps", "0", "--workload", "vw:points", tmpdir=tmp_path)
    assert res.returncode == 0, res.stderr
    # torch.distributed.run's torchelastic_* folders went with debtorch's own (issue 13, item 7);
    # torch's compile cache (torchinductor_<user>) is meant to stay.
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("torchinductor_")] == []
    doc = json.loads(res.stdout)
    sc = doc["summary"]["scaling"]
    assert sc["nproc"] == 2 and sc["backend"] == "gloo" and sc["efficiency"] > 0
    assert len(doc["ddp"][0]["ranks"]) == 2
    # One multi-process run (--quick) has no interval: its efficiency is inconclusive, never a result.
    assert sc["verdict"] == "inconclusive" and "2 processes: scaling efficiency inconclusive" in doc["verdict"]


@pytest.mark.slow
def test_a_bus_error_in_a_dataloader_worker_is_diagnosed_as_dev_shm(failures):
    res = failures["shm"]
    assert res.returncode == 1, res.stdout + res.stderr
    assert re.search(r"FAILED: a DataLoader worker died of a bus error: /dev/shm is too small for 1 DataLoader "
                     r"worker \(debtorch doctor: memory\.E00[12]\) \(warming up: tuned\)", res.stdout)
    assert "fix: " in res.stdout and "Traceback" not in res.stdout + res.stderr
    # The report is still printed, with the failure under it.
    assert "verdict: " in res.stdout


@pytest.mark.slow
def test_out_of_memory_suggests_the_micro_batch_that_fits(failures):
    res = failures["oom"]
    assert res.returncode == 1, res.stdout + res.stderr
    assert ("ran out of memory at micro-batch 16; micro-batch 4 with accumulation_steps 4 fits "
            "(16 samples per optimizer step, as before)") in res.stdout
    assert "Traceback" not in res.stdout + res.stderr


@pytest.mark.slow
def test_a_workload_module_that_fails_to_import_is_one_line(failures):
    res = failures["import"]
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "debtorch verify-train: cannot import vw_broken (from vw_broken:make): "
        "ModuleNotFoundError: No module named 'debtorch_no_such_dependency'")
    assert res.stdout == ""


@pytest.mark.slow
def test_cuda_on_a_machine_without_one_is_bad_input(failures):
    if failures["gpu"]:
        pytest.skip("this machine has a GPU")
    res = failures["cuda"]
    assert res.returncode == 2 and "sees no GPU" in res.stderr


@pytest.mark.slow
def test_ctrl_c_prints_what_was_measured_and_exits_130():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", "verify-train", "--quick", "--budget", BUDGET,
                             "--workload", "vw:slow_points"], cwd=WORKLOADS,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    deadline = time.monotonic() + TIMEOUT
    try:
        # Wait until round 2 starts: round 1's baseline and tuned are measured by then.
        for line in proc.stderr:
            seen.append(line)
            if "round 2: " in line:
                proc.send_signal(signal.SIGINT)
                break
            assert time.monotonic() < deadline
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(seen) + err
    assert "interrupted" in err and "Traceback" not in err
    # One round measured: too few for any verdict on the speed-up.
    assert re.search(r"(?m)^verdict: interrupted, so far: speed-up inconclusive \(1 round; about 2 more rounds ", out)


# ---------------------------------------------------------------- the engine's addition for convergence runs


@pytest.mark.slow
def test_a_convergence_run_stops_at_the_target_and_says_how_many_steps_ran():
    from debtorch.train.engine import run_trial
    from debtorch.train.workloads import load_workload

    sys.path.insert(0, str(WORKLOADS))
    try:
        wl = load_workload("vw:oom_above", {"limit": 64})
    finally:
        sys.path.remove(str(WORKLOADS))
    full = run_trial(wl, {}, steps=40, warmup_steps=1, target_loss=0.0)
    assert full.steps == 40 and full.target_step is None  # a loss never falls below 0
    stop = run_trial(wl, {}, steps=200, warmup_steps=1, target_loss=full.losses[10], stop_at_target=True)
    assert stop.target_step is not None and stop.steps == stop.target_step - 1 < 200
    assert stop.steps_requested == 200 and len(stop.losses) == stop.steps



# ---------------------------------------------------------------- GPU utilisation through NVML, faked


def test_gpu_utilisation_read_through_nvml_reaches_the_report():
    """The engine's gauges with the NVML fake replaying recorded GPUs (debtorch/nvmlfake.py)."""
    from debtorch import nvmlfake
    from debtorch.report import verify as report
    from debtorch.report.console import texts
    from debtorch.train import engine
    from debtorch.train.device import Device
    from debtorch.train.result import TrialResult
    from debtorch.verify import analysis
    from debtorch.verify.measure import Measured

    hosts = Path(__file__).parent / "hosts"

    def sampled(host):
        nv = nvmlfake.load(hosts / host / "_nvml.json")
        nv.nvmlInit()
        gauges = engine._Gauges(nv, nv.nvmlDeviceGetHandleByIndex(0))
        gauges.timing = True
        gauges.between_steps(force=True)
        gauges.between_steps(force=True)
        return gauges.util

    def report_of(util):
        m = Measured()
        m.device = Device.parse("cuda:0")
        mean = (sum(util) / len(util)) if util else None
        m.trials["tuned"] = [TrialResult(samples_per_s=900.0, gpu_util_mean=mean)]
        summary = analysis.summary(m)
        return dict((r[0], r[2]) for r in report.rows(m, summary)), texts(report.lines(m, summary))

    util = sampled("debian13-workstation-rtx3080")  # recorded at 65% busy
    assert util == [65.0, 65.0]
    rows, lines = report_of(util)
    assert rows["GPU utilisation (NVML)"] == "65%"
    assert not any(line.startswith("GPU utilisation: NVML gave no samples") for line in lines)
    # The recorded A100 server answers NOT_SUPPORTED for utilisation: no samples, and the report says so.
    assert sampled("debian12-server-8xa100-nvlink") == []
    rows, lines = report_of([])
    assert "GPU utilisation (NVML)" not in rows
    assert any(line.startswith("GPU utilisation: NVML gave no samples") for line in lines)


@pytest.mark.slow
def test_a_nan_loss_is_a_failed_run_and_the_json_stays_strict(failures):
    res = failures["nan"]
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout, parse_constant=lambda word: pytest.fail(f"{word} in the JSON"))
    assert doc["exit_code"] == 1 and doc["failure"]["kind"] == "nonfinite_loss"
    assert doc["summary"]["nonfinite_loss"][0]["step"] == 1
    assert doc["converge"]["tuned"]["loss_last"] is None   # null, never NaN
    assert "stays within" not in res.stdout and "LOSS NOT FINITE" in doc["verdict"]
    assert res.stderr.strip().splitlines()[-1].startswith(
        "debtorch verify-train: the loss became non-finite (NaN or infinite) at step 1")


@pytest.mark.slow
def test_a_worker_that_exits_while_loading_gives_a_whole_line_and_a_json_document(failures):
    res = failures["exit"]
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "debtorch verify-train: the worker exited with status 3 while loading the workload")
    doc = json.loads(res.stdout)
    assert doc["failure"]["kind"] == "died" and doc["verdict"].endswith("while loading the workload")
    assert doc["facts"]["os"]["id"] == "debian" and doc["exit_code"] == 1


@pytest.mark.slow
def test_a_simulated_accelerator_run_says_so_everywhere_and_skips_convergence(tmp_path):
    # Three runs at once (each mostly starts an interpreter and a worker: a CPU each).
    plot, sim = tmp_path / "sim.png", ("--quick", "--device", "sim:20000")
    done = at_once({"text": lambda: verify(*sim, "--workload", "vw:points", "--plot", str(plot)),
                    "json": lambda: verify(*sim, "--json", "--workload", "vw:points"),
                    "nproc": lambda: verify(*sim, "--nproc", "2")}, workers=3)
    res = done["text"]
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "on simulated accelerator (20000 samples/s)" in out and "device bound (simulated)" in out
    assert "per-step sync (the loss read every step, as .item() does): costs" in out
    assert "convergence runs skipped: a simulated accelerator runs no model" in out and "time to loss" not in out
    assert re.search(r"(?m)^verdict: simulated accelerator \(20000 samples/s\): .*of the device", out)
    assert plot.stat().st_size > 0
    doc = json.loads(done["json"].stdout)
    assert doc["summary"]["sim"]["words"] == "simulated accelerator (20000 samples/s)"
    assert doc["device"] == "sim:20000,launch=1,gbps=25,ahead=3,sync=0" and doc["trials"]["tuned_sync"]
    assert done["nproc"].returncode == 2
