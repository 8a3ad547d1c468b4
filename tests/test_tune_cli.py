"""`debtorch tune` as a user runs it: output, files, exit codes."""

import json

import pytest
from hostkit import HOSTS
from test_tune_config import readonly_dir  # noqa: F401  (fixture)
from tune_facts import all_pairs, make_facts, server_8x_a100
from typer.testing import CliRunner

from debtorch import facts as facts_mod
from debtorch.cli import app
from debtorch.cli.shared import Emit
from debtorch.cli.tune import ModelKind
from debtorch.findings import catalogue
from debtorch.tune.config import load_config


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2 (Debian 12's 8.1.3)
    except TypeError:
        runner = CliRunner()  # click >= 8.2 always separates stderr
    return runner.invoke(app, ["tune", *args])


@pytest.fixture
def server_json(tmp_path):
    path = tmp_path / "server.json"
    path.write_text(json.dumps(server_8x_a100(p2p=all_pairs(8, bad={(0, 4)}))))
    return str(path)


@pytest.fixture
def vm_json(tmp_path):
    path = tmp_path / "vm.json"
    path.write_text(json.dumps(make_facts(cpus=2, features={"avx512_bf16": True}, torch="2.13.0+cpu",
                                          torch_cuda=None)))
    return str(path)


def test_table_shows_every_setting_with_its_reason(server_json):
    r = invoke("--facts", server_json)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("debtorch tune: cuda training, chosen by the rules")
    assert "loader.num_workers" in r.stdout and "tune.R003:" in r.stdout
    assert "NCCL_P2P_DISABLE=1" in r.stdout


def test_json_document(server_json):
    r = invoke("--facts", server_json, "--json", "--global-batch", "2048", "--micro-batch", "64")
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["device"] == "cuda"
    assert doc["settings"]["nproc"] == 8 and doc["settings"]["accumulation_steps"] == 4
    assert set(doc["reasons"]) == set(doc["settings"])
    assert all(v["rule"].startswith("tune.") and v["rule"] in catalogue() for v in doc["reasons"].values())
    assert doc["fingerprint"]["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 8
    assert doc["measurement"] is None


def test_emit_env_prints_exports_and_the_torchrun_line(server_json):
    r = invoke("--facts", server_json, "--emit", "env")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert "export NCCL_P2P_DISABLE=1" in lines and "export OMP_NUM_THREADS=8" in lines
    assert lines[-1] == "torchrun --standalone --nproc_per_node=8 train.py"
    assert all(line.startswith(("#", "export ", "torchrun ")) for line in lines)


@pytest.mark.parametrize("value", list(Emit))
def test_every_emit_format_is_handled(server_json, value):
    r = invoke("--facts", server_json, "--emit", value.value)
    assert r.exit_code == 0 and r.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda", "sim:500"])
@pytest.mark.parametrize("model", list(ModelKind))
def test_every_device_and_model_kind_is_handled(server_json, device, model):
    r = invoke("--facts", server_json, "--json", "--device", device, "--model", model.value)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["device"] == (device if device != "sim:500" else "sim:500,launch=1,gbps=25,ahead=3,sync=0")


@pytest.mark.parametrize("value, says", [("tpu", "--device must be cpu, cuda, cuda:N or sim:RATE (got 'tpu')"),
                                         ("sim:0", "RATE must be a number from 0.01"),
                                         ("sim:h100-llama", "presets: a100-resnet50, a100-resnet50-tf32")])
def test_a_bad_device_is_one_line(server_json, value, says):
    r = invoke("--facts", server_json, "--device", value)
    assert r.exit_code == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_a_simulated_device_is_tuned_as_an_accelerator_that_runs_no_model(server_json):
    doc = json.loads(invoke("--facts", server_json, "--json", "--device", "sim:a100-resnet50").stdout)
    s, reasons = doc["settings"], doc["reasons"]
    assert s["num_workers"] >= 1 and s["pin_memory"] and s["non_blocking"] and s["precision"] == "fp32"
    assert "runs no model" in reasons["precision"]["text"] and doc["device"].endswith("name=a100-resnet50")
    assert invoke("--facts", server_json, "--device", "sim:500", "--nproc", "2").exit_code == 2


def test_write_then_refuse_to_overwrite_then_force(vm_json, tmp_path):
    path = tmp_path / "debtorch.toml"
    r = invoke("--facts", vm_json, "--write", str(path), "--steps", "100")
    assert r.exit_code == 0, r.stderr
    assert f"wrote {path}" in r.stderr
    cfg = load_config(str(path))
    assert cfg.settings.num_workers == 0 and cfg.total_steps == 100 and cfg.tuned["by"] == "rules"
    before = path.read_text()
    r = invoke("--facts", vm_json, "--write", str(path))
    assert r.exit_code == 2
    assert r.stderr == f"debtorch tune: {path}: exists; use --force to replace it\n"
    assert path.read_text() == before
    r = invoke("--facts", vm_json, "--write", str(path), "--force")
    assert r.exit_code == 0 and load_config(str(path)).total_steps is None


def test_read_only_destination_is_one_line_exit_2_and_no_file(vm_json, readonly_dir):  # noqa: F811
    path = readonly_dir / "debtorch.toml"
    r = invoke("--facts", vm_json, "--write", str(path))
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"debtorch tune: {path}: cannot write")
    assert list(readonly_dir.iterdir()) == []


@pytest.mark.parametrize("args,message", [
    (["--measure"], "--facts tunes for another machine by rules; --measure needs this one"),
    (["--emit", "env", "--json"], "--emit env and --json print different things; choose one"),
    (["--force"], "--force only applies to --write"),
    (["--nproc", "0"], "--nproc must be an integer from 1 to 65536 (got 0)"),
    (["--epochs", "2", "--steps", "10"], "give --epochs or --steps, not both"),
    (["--global-batch", "64", "--micro-batch", "16"],
     "--global-batch 64 is smaller than one step: --micro-batch 16 x 8 process(es)"),
    (["--micro-batch", "0"], "--micro-batch must be an integer from 1 to 2147483647 (got 0)"),
    (["--steps", "0"], "--steps must be an integer from 1 to 2147483647 (got 0)"),
])
def test_bad_usage_is_one_line_and_exit_2(server_json, args, message):
    r = invoke("--facts", server_json, *args)
    assert r.exit_code == 2
    assert r.stderr == f"debtorch tune: {message}\n"


def test_unreadable_facts_file(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text("{not json")
    r = invoke("--facts", str(bad))
    assert r.exit_code == 2 and r.stderr.startswith(f"debtorch tune: --facts {bad}: not JSON")
    assert r.stderr.count("\n") == 1


def test_budget_too_small_is_refused_before_the_facts_are_collected(monkeypatch):
    def collect(host, options):
        raise AssertionError("facts collected (probing the interpreter takes seconds)")

    monkeypatch.setattr(facts_mod, "collect", collect)
    r = invoke("--measure", "--budget", "3")
    assert r.exit_code == 2
    assert r.stderr == "debtorch tune: --budget 3 is too small to measure anything; give at least 20 seconds\n"
    r = invoke("--measure", "--budget", "-1")
    assert r.exit_code == 2 and "--budget must be a number of seconds > 0" in r.stderr


def test_ctrl_c_while_measuring_is_one_line_exit_130_and_no_file(vm_json, tmp_path, monkeypatch):
    from debtorch.tune import measure as measure_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(facts_mod, "collect", lambda host, options: json.loads(open(vm_json).read()))
    monkeypatch.setattr(measure_mod, "measure", interrupted)
    path = tmp_path / "debtorch.toml"
    r = invoke("--measure", "--write", str(path))
    assert r.exit_code == 130
    assert r.stderr == "debtorch tune: interrupted; nothing written\n"
    assert not path.exists()


def test_rules_for_a_recorded_machine_with_host():
    r = invoke("--host", str(HOSTS / "debian12-server-8xa100-nvlink"), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["device"] == "cuda" and doc["settings"]["nproc"] == 8
    assert doc["fingerprint"]["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 8
    r = invoke("--host", str(HOSTS / "debian12-vm-2core"), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["device"] == "cpu"


@pytest.mark.parametrize("args,message", [
    (["--host", str(HOSTS / "debian12-vm-2core"), "--measure"],
     "--host tunes for another machine by rules; --measure needs this one"),
    (["--host", str(HOSTS / "debian12-vm-2core"), "--facts", "f.json"], "use only one of --facts and --host"),
    (["--host", "/nonexistent/recording"], "--host /nonexistent/recording: "),
])
def test_a_recorded_machine_is_not_measured(args, message):
    r = invoke(*args)
    assert r.exit_code == 2 and r.stderr.startswith(f"debtorch tune: {message}") and r.stderr.count("\n") == 1


def test_the_library_refuses_to_measure_a_recorded_machine(replay):
    from debtorch.tune import rules, run
    from debtorch.tune.measure import MeasureOptions, MeasureUsageError

    host = replay("debian12-vm-2core")
    facts = run.read_facts(host)
    assert run.tune(facts, rules.Request(), host).rec.device.is_cpu  # rules: any machine
    with pytest.raises(MeasureUsageError, match="--measure needs this machine") as exc:
        run.tune(facts, rules.Request(), host, MeasureOptions())
    assert exc.value.user_input


def test_the_written_settings_are_said_in_words_and_how_they_were_chosen(vm_json, tmp_path):
    """`wrote t.toml (w0 bf16 t2; chosen by rules)` said nothing to a new user (issue 34, item 10)."""
    path = tmp_path / "t.toml"
    r = invoke("--facts", vm_json, "--write", str(path))
    assert r.exit_code == 0, r.stderr
    assert r.stderr == (f"debtorch tune: wrote {path}: no DataLoader workers (loading in the training process), "
                        "bf16, 2 compute threads (w0 bf16 t2, chosen by the rules)\n")
    assert invoke("--facts", vm_json).stdout.startswith("debtorch tune: cpu training, chosen by the rules\n")


def test_measuring_off_a_terminal_logs_a_line_per_trial(vm_json, tmp_path, monkeypatch):
    """With stderr in a log, tune --measure said nothing for minutes (issue 34, item 6)."""
    from debtorch.train.settings import Settings
    from debtorch.tune import measure as measure_mod
    from debtorch.tune.search import Result, Trial

    def measure(rec, facts, opts, on_trial=None, host=None):
        result = Result(best=rec.settings, start=rec.settings, budget=opts.budget_s, spent=30.0)
        for i, (s, sps) in enumerate([(rec.settings, 100.0), (Settings(num_workers=1, threads=1), None)]):
            result.trials.append(Trial(i + 1, "split", s, sps, 10.0, error=None if sps else "died"))
            on_trial(result.trials[-1], 10.0 * (i + 1), 100.0)
        return result

    monkeypatch.setattr(facts_mod, "collect", lambda host, options: json.loads(open(vm_json).read()))
    monkeypatch.setattr(measure_mod, "measure", measure)
    r = invoke("--measure", "--budget", "60")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines()[:2] == [
        "tune: trial 1 (split): w0 bf16 t2 -> 100.0 samples/s, 10 s of the search's 100",
        "tune: trial 2 (split): w1 np fp32 t1 -> failed, 20 s of the search's 100"]


def test_the_settings_are_followed_by_what_to_run_next(vm_json, tmp_path):
    """Results without a next step (issue 34, item 7): save, load, check, measure."""
    r = invoke("--facts", vm_json)
    assert r.stdout.splitlines()[-1] == (
        "next: save them for your training script: debtorch tune --write debtorch.toml; measure them on your own "
        "workload: debtorch tune --measure --workload MODULE:FUNCTION --write debtorch.toml (docs/workloads.md)")
    path = tmp_path / "t.toml"
    r = invoke("--facts", vm_json, "--write", str(path))
    assert r.stdout == (f'next: load them in your training script: cfg = debtorch.load("{path}") (docs/runtime.md); '
                        f"see what they change on this machine: debtorch verify-train --config {path}; measure them "
                        "on your own workload: debtorch tune --measure --workload MODULE:FUNCTION --write "
                        "debtorch.toml (docs/workloads.md)\n")
    assert json.loads(invoke("--facts", vm_json, "--json").stdout)["next"][0].startswith("save them")
