"""The config file: written with reasons, loaded with one-line errors, never half-written."""

import datetime
import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomlkit
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tune_facts import all_pairs, server_8x_a100

from debtorch import schema
from debtorch.fingerprint import from_facts
from debtorch.train.device import Device
from debtorch.tune import config
from debtorch.tune.config import ConfigError, load_config, parse_config, write_atomic, write_config
from debtorch.tune.rules import Request, recommend

GOLDEN = Path(__file__).resolve().parent / "golden" / "tune-8xa100.toml"
NOW = datetime.datetime(2026, 11, 1, 12, 0, tzinfo=datetime.timezone.utc)


def sample(doc=None, request=None):
    doc = doc or server_8x_a100(p2p=all_pairs(8, bad={(0, 1)}))
    rec = recommend(doc, request or Request(global_batch=1024, micro_batch=32, steps=5000, model="conv"))
    return rec, from_facts(doc), config.tuned_table("rules", rec.device, now=NOW)


def test_written_config_loads_back_to_the_same_settings(tmp_path):
    rec, fp, tuned = sample()
    path = tmp_path / "debtorch.toml"
    write_config(str(path), rec, fp, tuned)
    cfg = load_config(str(path))
    assert cfg.settings == rec.settings
    assert cfg.env == rec.env == {"NCCL_P2P_DISABLE": "1", "OMP_NUM_THREADS": "8"}
    assert cfg.fingerprint == fp and fp["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 8 and fp["driver"] == "580.65.06"
    assert cfg.tuned == tuned and cfg.device == "cuda"
    assert cfg.total_steps == 5000


def test_every_setting_has_its_reason_as_a_comment_above_it():
    rec, fp, tuned = sample()
    lines = config.render_config(rec, fp, tuned).splitlines()
    for name, reason in rec.reasons.items():
        value = getattr(rec.settings, name)
        at = next(i for i, line in enumerate(lines)
                  if line.startswith(f"{name} =") or line.startswith(f"# {name}: not set"))
        assert lines[at - 1] == f"# {reason}", name
        if value is None:
            assert "meaning" in lines[at]


def test_rendering_matches_the_golden_file():
    # The golden file was checked to be byte-identical with Debian 12's tomlkit 0.11.7.
    rec, fp, tuned = sample()
    assert config.render_config(rec, fp, tuned) == GOLDEN.read_text()


def test_golden_file_is_a_valid_config():
    cfg = load_config(str(GOLDEN))
    assert cfg.settings.nproc == 8


def line_of_key(text, key_line):
    return next(i for i, line in enumerate(text.splitlines(), start=1) if line.startswith(key_line))


BAD_VALUES = [
    ("loader", "num_workers", '"four"', 'must be an integer from 0 to 65536 (got "four")'),
    ("loader", "num_workers", "-1", "must be an integer from 0 to 65536 (got -1)"),
    ("loader", "num_workers", "true", "must be an integer from 0 to 65536 (got true)"),
    ("loader", "num_workers", "2.0", "must be an integer from 0 to 65536 (got 2.0)"),
    ("loader", "pin_memory", '"yes"', 'must be true or false (got "yes")'),
    ("loader", "pin_memory", "1", "must be true or false (got 1)"),
    ("loader", "prefetch_factor", "0", "must be an integer from 1 to 256 (got 0)"),
    ("loader", "persistent_workers", "[]", "must be true or false (got an array)"),
    ("loader", "start_method", '"thread"', 'must be one of fork, forkserver, spawn (got "thread")'),
    ("compute", "precision", '"fp8"', 'must be one of fp32, bf16, fp16 (got "fp8")'),
    ("compute", "precision", "16", "must be one of fp32, bf16, fp16 (got 16)"),
    ("compute", "tf32", '"on"', 'must be true or false (got "on")'),
    ("compute", "cudnn_benchmark", "0", "must be true or false (got 0)"),
    ("compute", "channels_last", "{}", "must be true or false (got a table)"),
    ("compute", "fused_optimizer", '""', 'must be true or false (got "")'),
    ("compute", "compile", "1.5", "must be true or false (got 1.5)"),
    ("compute", "non_blocking", '"false"', 'must be true or false (got "false")'),
    ("compute", "threads", "0", "must be an integer from 1 to 65536 (got 0)"),
    ("distributed", "nproc", "0", "must be an integer from 1 to 65536 (got 0)"),
    ("distributed", "backend", '"mpi"', 'must be one of nccl, gloo (got "mpi")'),
    ("batch", "micro_batch", "-32", "must be an integer from 1 to 2147483647 (got -32)"),
    ("batch", "accumulation_steps", "0", "must be an integer from 1 to 2147483647 (got 0)"),
    ("schedule", "lr_schedule", '"cosine"', 'must be one of constant, onecycle (got "cosine")'),
    ("schedule", "max_lr", "0", "must be a number > 0 and at most 1000 (got 0)"),
    ("schedule", "max_lr", "nan", "must be a number > 0 and at most 1000 (got nan)"),
    ("schedule", "pct_start", "1.0", "must be a number between 0 and 1 (got 1.0)"),
    ("schedule", "total_steps", "0", "must be an integer from 1 to 2147483647 (got 0)"),
    ("schedule", "epochs", '"ten"', 'must be an integer from 1 to 2147483647 (got "ten")'),
    ("tuned", "by", '"guess"', 'must be one of rules, measured, calibrated, watch (got "guess")'),
    ("tuned", "device", '"tpu"', 'must be "cpu", "cuda" or a sim:RATE,launch=...,gbps=...,ahead=...,sync=... spec (got "tpu")'),
    ("tuned", "budget_s", "-5", "must be a number > 0 and at most 604800 (got -5)"),
    ("tuned", "date", "2026-11-01", "must be a string (got 2026-11-01)"),
    ("fingerprint", "usable_cpus", "0", "must be an integer from 1 to 2147483647 (got 0)"),
    ("fingerprint", "gpus", '"A100"', 'must be an array of strings (got "A100")'),
    ("fingerprint", "torch", "2", "must be a string (got 2)"),
    ("env", "OMP_NUM_THREADS", "8", "must be a string (got 8)"),
    ("env", "OMP_NUM_THREADS", '"a\\nb"', 'must be one line (got "a\\nb")'),
]


@pytest.mark.parametrize("table,key,bad,message", BAD_VALUES)
def test_bad_value_names_file_line_and_key(tmp_path, table, key, bad, message):
    rec, fp, tuned = sample()
    text = config.render_config(rec, fp, tuned)
    doc = tomlkit.parse(text)
    doc[table][key] = 0  # make sure the key is there, then put the bad text in its place
    text = tomlkit.dumps(doc)
    text = re.sub(rf"(?m)^{key} = .*$", lambda m: f"{key} = {bad}", text)
    path = tmp_path / "debtorch.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    line = line_of_key(text, f"{key} = ")
    assert str(exc.value) == f"{path}:{line}: {table}.{key}: {message}"


def test_the_issue_example_message(tmp_path):
    path = tmp_path / "debtorch.toml"
    path.write_text('schema_version = 1\n\n[loader]\n# workers\nnum_workers = "four"\n')
    with pytest.raises(ConfigError, match=r'^.*debtorch.toml:5: loader.num_workers: must be an integer from 0 '
                                          r'to 65536 \(got "four"\)$'):
        load_config(str(path))


@pytest.mark.parametrize("text,expected", [
    ("schema_version = 1\n[loader]\nnum_wrokers = 2\n",
     "t.toml:3: loader.num_wrokers: unknown key (known: num_workers, pin_memory, prefetch_factor, "
     "persistent_workers, start_method)"),
    ("schema_version = 1\n[loader]\nprecision = 'bf16'\n",
     "t.toml:3: loader.precision: unknown key (known: num_workers, pin_memory, prefetch_factor, "
     "persistent_workers, start_method); it belongs in [compute]"),
    ("schema_version = 1\n\n[optimizer]\nlr = 1\n",
     "t.toml:3: optimizer: unknown key (known: schema_version, loader, compute, distributed, batch, schedule, limits, "
     "env, tuned, fingerprint)"),
    ("schema_version = 1\n[tuned]\nby = 'rules'\nhost = 'x'\n",
     "t.toml:4: tuned.host: unknown key (known: by, date, debtorch_version, device, simulated, workload, budget_s)"),
    ("schema_version = 1\n[env]\nlower = 'x'\n", "t.toml:3: env.lower: not an environment variable name (A-Z, 0-9, _)"),
    ("schema_version = 1\nloader = 3\n", "t.toml:2: loader: must be a table (got 3)"),
    ("schema_version = 2\n", "t.toml:1: schema_version: this debtorch reads 1 (got 2)"),
    ("[loader]\nnum_workers = 1\n", "t.toml:1: schema_version: missing; was this written by 'debtorch tune --write'?"),
    ("schema_version = 1\n[loader]\nnum_workers = 0\nprefetch_factor = 2\n",
     "t.toml:4: loader.prefetch_factor: needs num_workers > 0"),
    ("schema_version = 1\n[fingerprint]\ngpus = ['A100', 2]\n", "t.toml:3: fingerprint.gpus[1]: must be a string (got 2)"),
    ("schema_version = 1\n[loader]\npersistent_workers = true\n",
     "t.toml:3: loader.persistent_workers: needs num_workers > 0"),
    ("schema_version = 1\nloader.num_workers = -2\n", "t.toml:2: loader.num_workers: must be an integer from 0 to 65536 (got -2)"),
    ("schema_version = 1\nloader = { num_workers = 'x' }\n",
     't.toml:2: loader.num_workers: must be an integer from 0 to 65536 (got "x")'),
    ('schema_version = 1\n[compute]\n"precision" = "fp64"\n',
     't.toml:3: compute.precision: must be one of fp32, bf16, fp16 (got "fp64")'),
    ('schema_version = 1\n[ compute ]  # kernels\nthreads = 0\n', "t.toml:3: compute.threads: must be an integer from 1 to 65536 (got 0)"),
    ('schema_version = 1\nnote = """\n[loader]\nnum_workers = 1\n"""\n[loader]\nnum_workers = -1\n',
     "t.toml:2: note: unknown key (known: schema_version, loader, compute, distributed, batch, schedule, limits, "
     "env, tuned, fingerprint)"),
])
def test_unknown_keys_and_bad_values_are_one_line(text, expected):
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "t.toml")
    assert str(exc.value) == expected


def test_multiline_string_does_not_confuse_the_line_finder():
    text = 'schema_version = 1\n[fingerprint]\ncpu_model = """\n[loader]\nnum_workers = 1\n"""\n[loader]\nnum_workers = -1\n'
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "t.toml")
    # The first key = line inside the string (line 5) is not taken for the real one (line 8).
    assert str(exc.value) == "t.toml:8: loader.num_workers: must be an integer from 0 to 65536 (got -1)"
    lines = schema.key_lines(text.replace('"""\n[loader]\nnum_workers = 1\n"""', '"x"'))
    assert lines["loader.num_workers"] == 5


def test_invalid_toml_and_bad_bytes_name_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^t.toml:3: not valid TOML: "):
        parse_config("schema_version = 1\n[loader]\nnum_workers = = 2\n", "t.toml")
    # Read as every input is (debtorch/inputs.py): a stray byte as latin-1, UTF-16 and a BOM alike.
    path = tmp_path / "bin.toml"
    path.write_bytes(b"schema_version = 1\n# \xff\xfe\n[loader]\nnum_workers = 3\n")
    assert load_config(str(path)).settings.num_workers == 3
    text = "schema_version = 1\n[loader]\nnum_workers = 3\n"
    for data in (text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode()):
        path.write_bytes(data)
        assert load_config(str(path)).settings.num_workers == 3
    with pytest.raises(ConfigError, match=r"missing.toml: cannot read \(No such file or directory\)$"):
        load_config(str(tmp_path / "missing.toml"))


def test_a_minimal_hand_written_config_gets_defaults():
    cfg = parse_config("schema_version = 1\n[compute]\nprecision = 'bf16'\n")
    assert cfg.settings.precision == "bf16" and cfg.settings.num_workers == 0 and cfg.device == "cpu"


TOML_KEYS = st.sampled_from(["schema_version", "loader", "compute", "num_workers", "precision", "threads", "env",
                             "OMP", "tuned", "by", "fingerprint", "gpus", "x", "schedule", "pct_start"])
TOML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=True) | st.text(max_size=8)
    | st.sampled_from(["fp32", "bf16", "fork", "cpu", "rules", "onecycle"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TOML_KEYS, children, max_size=4),
    max_leaves=12,
)


def _clean(v):
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_clean(x) for x in v if x is not None]
    return v


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=6), st.booleans())
def test_arbitrary_toml_documents_give_a_config_or_one_line(doc, versioned):
    doc = _clean(doc)
    if versioned:
        doc["schema_version"] = 1
    try:
        text = tomlkit.dumps(doc)
    except Exception:  # tomlkit cannot write this shape (arrays of mixed tables): not our input
        return
    _one_line_or_config(text)


@hsettings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_gives_a_config_or_one_line(text):
    _one_line_or_config(text)


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([
    "schema_version = 1", "[loader]", "[compute]", "[env]", "num_workers = 2", "num_workers = 'x'",
    "precision = 'bf16'", "threads = 0", "prefetch_factor = 2", 'X = """', '"""', "loader.threads = 1",
    "[[loader]]", "a = {b = 1}", "# comment", "", "[fingerprint]", "gpus = ['a', 1]", "x.y.z = 1",
]), max_size=10))
def test_arbitrary_config_like_lines_give_a_config_or_one_line(lines):
    _one_line_or_config("\n".join(lines))


def _one_line_or_config(text):
    try:
        cfg = parse_config(text, "p.toml")
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and re.match(r"^p\.toml:\d+: ", msg), msg
    else:
        assert cfg.settings.validate() == []


# -- atomic writes -------------------------------------------------------------


def leftovers(directory):
    return [p.name for p in Path(directory).iterdir() if p.name.startswith(".debtorch-")]


def test_existing_file_is_never_overwritten_without_force(tmp_path):
    path = tmp_path / "debtorch.toml"
    path.write_text("mine\n")
    rec, fp, tuned = sample()
    with pytest.raises(ConfigError, match="exists; use --force to replace it$"):
        write_config(str(path), rec, fp, tuned)
    assert path.read_text() == "mine\n" and not leftovers(tmp_path)
    write_config(str(path), rec, fp, tuned, force=True)
    assert load_config(str(path)).settings == rec.settings and not leftovers(tmp_path)


def test_a_file_that_appears_during_the_write_is_not_replaced(tmp_path, monkeypatch):
    path = tmp_path / "debtorch.toml"
    real_fsync = os.fsync

    def sneaky(fd):  # someone creates the file between our check and our link
        real_fsync(fd)
        path.write_text("theirs\n")

    monkeypatch.setattr(os, "fsync", sneaky)
    with pytest.raises(ConfigError, match="exists"):
        write_atomic(str(path), "schema_version = 1\n")
    assert path.read_text() == "theirs\n" and not leftovers(tmp_path)


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "debtorch.toml"
    path.write_text("old\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ConfigError, match=r"cannot write \(No space left on device\)$"):
        write_atomic(str(path), "schema_version = 1\n" * 1000, force=True)
    assert path.read_text() == "old\n" and not leftovers(tmp_path)


def test_missing_directory_and_directory_destination(tmp_path):
    with pytest.raises(ConfigError, match="does not exist$"):
        write_atomic(str(tmp_path / "no" / "x.toml"), "")
    with pytest.raises(ConfigError, match="is a directory$"):
        write_atomic(str(tmp_path), "", force=True)


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory that cannot be written, even by root (a read-only tmpfs when we may mount)."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(d)], capture_output=True).returncode != 0:
        pytest.skip("running as root without the right to mount a read-only tmpfs")
    try:
        yield d
    finally:
        subprocess.run(["umount", str(d)], capture_output=True)


def test_read_only_destination_is_one_line_and_no_file(readonly_dir):
    rec, fp, tuned = sample()
    path = readonly_dir / "debtorch.toml"
    with pytest.raises(ConfigError) as exc:
        write_config(str(path), rec, fp, tuned)
    assert str(exc.value).startswith(f"{path}: cannot write")
    assert list(readonly_dir.iterdir()) == []


def _sim_spec() -> str:
    from debtorch.cli.shared import parse_device

    return str(parse_device("sim:800"))


def test_a_config_tuned_on_a_simulated_device_is_for_the_gpu_it_stands_for(tmp_path):
    """tune --measure --device sim:800 --write: training code runs on the real device (issue 34, item 2)."""
    spec = _sim_spec()
    device = Device.parse(spec)
    rec, fp, _ = sample(request=Request(device=device))
    path = tmp_path / "sim.toml"
    write_config(str(path), rec, fp, config.tuned_table("measured", device, workload="builtin:images", now=NOW))
    text = path.read_text()
    assert 'device = "cuda"' in text and f'simulated = "{spec}"' in text
    cfg = load_config(str(path))
    assert (cfg.device, cfg.simulated, cfg.tuned_for) == ("cuda", spec, spec)


def test_an_older_config_holding_a_sim_spec_as_its_device_loads_as_cuda():
    spec = _sim_spec()
    cfg = parse_config(f'schema_version = 1\n[tuned]\nby = "measured"\ndevice = "{spec}"\n')
    assert (cfg.device, cfg.simulated) == ("cuda", spec)
    for device in ("cpu", "cuda"):
        cfg = parse_config(f'schema_version = 1\n[tuned]\ndevice = "{device}"\n')
        assert (cfg.device, cfg.simulated, cfg.tuned_for) == (device, None, device)
    with pytest.raises(ConfigError, match="tuned.simulated"):
        parse_config('schema_version = 1\n[tuned]\ndevice = "cuda"\nsimulated = "cuda"\n')


def test_the_machine_bound_says_where_its_number_comes_from():
    """"at most 32 here: 4 x 2 usable CPUs" did not add up: the floor is said (issue 34, item 10)."""
    assert config.machine_problem({"num_workers": 33}, 2) == (
        "num_workers", "33 is more than this machine can run (at most 32 here: 4 x 2 usable CPUs is 8, "
                       "below the floor of 32)")
    assert config.machine_problem({"threads": 65}, 16) == (
        "threads", "65 is more than this machine can run (at most 64 here: 4 x 16 usable CPUs)")


def test_the_short_labels_are_said_in_one_legend():
    from debtorch.train.settings import Settings, legend

    s = Settings(num_workers=1, prefetch_factor=2, pin_memory=True, threads=1)
    assert s.short() == "w1 pf2 np pin fp32 t1"
    assert s.words() == ("1 DataLoader worker, 2 batches prefetched per worker, workers not persistent, "
                         "pinned memory, fp32, 1 compute thread")
    assert legend([s.short(), Settings().short()]) == (
        "settings in short: w = DataLoader workers, pf = batches each worker prefetches, np = workers not "
        "persistent (restarted every epoch), pin = pinned memory, fp32/bf16/fp16 = precision, t = compute threads")
    assert legend(["w0 bf16 cl"]) == ("settings in short: w = DataLoader workers, fp32/bf16/fp16 = precision, "
                                      "cl = channels_last")


def test_every_setting_is_declared_once_and_the_tables_and_the_search_are_made_from_it():
    """Issue 32: a setting's type, bounds, table, unset meaning and search dimension are one declaration."""
    import dataclasses

    from debtorch.train import settings as declared
    from debtorch.train.device import CPU, Device
    from debtorch.train.settings import SETTINGS, Settings
    from debtorch.tune.search import SPLIT, default_space

    names = [f.name for f in dataclasses.fields(Settings)]
    assert [s.name for s in SETTINGS] == names == list(declared.FIELDS)
    assert [n for table in config.TABLES.values() for n in table] == names and config.TABLES is declared.TABLES
    assert set(config.UNSET) == {s.name for s in SETTINGS if s.default is None} == declared.OPTIONAL
    assert Settings() == Settings(**{s.name: s.default for s in SETTINGS})
    searched = {s.name for s in SETTINGS if s.search is not None}
    sim = Device.parse("sim:300,launch=1,gbps=25,ahead=3,sync=0")
    raced = {f for device in (CPU, sim) for d in default_space(Settings(), device, 4, ["fp32", "bf16"], conv=True)
             for f in d.decides()}
    assert raced == searched | {"non_blocking"}   # pinned memory takes non_blocking along (its `together`)
    dims = [d.name for d in default_space(Settings(), sim, 4, ["fp32"], conv=False)]
    assert dims == [SPLIT, "prefetch_factor", "pin_memory", "persistent_workers"]   # in the declared order
