"""Issues 13 and 30, as an attacker and a careless user would try them: every number bounded, every
write safe, every bad option one line and the documented exit code.

Redaction: test_redact.py; streams: test_streams.py; signals: test_signals.py; the
fuzzing suite: test_fuzz.py.  Each test here failed before its fix.
"""

import json
import os
import stat
from pathlib import Path

import pytest
from clitools import HOSTS, cli_runner
from hostkit import diagnose, ids, make_host
from tune_facts import make_facts

import debtorch
from debtorch import outputs
from debtorch.cli import app, manpage
from debtorch.host import LiveHost
from debtorch.train.device import CPU
from debtorch.tune import config
from debtorch.tune.config import ConfigError, load_config, parse_config
from debtorch.tune.rules import Request, RequestError, recommend

runner = cli_runner()
CPUS = len(LiveHost().affinity())
LIMIT = config.machine_limit(CPUS)


def one_line(res, code=2):
    """The command said one line on stderr, exited ``code`` and printed no traceback."""
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.stderr.strip()


@pytest.fixture
def facts_file(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(make_facts(cpus=2)))
    return str(path)


# ---------------------------------------------------------------------------
# 1. Config values bounded


def write_cfg(tmp_path, body: str) -> str:
    path = tmp_path / "debtorch.toml"
    path.write_text("schema_version = 1\n" + body)
    return str(path)


@pytest.mark.parametrize("body,said", [
    ("[loader]\nnum_workers = 1000000\n", "3: loader.num_workers: must be an integer from 0 to 65536 (got 1000000)"),
    ("[distributed]\nnproc = 99999999999999999\n", "3: distributed.nproc: must be an integer from 1 to 65536"),
    ("[batch]\nmicro_batch = 4294967296\n", "3: batch.micro_batch: must be an integer from 1 to 2147483647"),
    ("[loader]\nnum_workers = 2\nprefetch_factor = 100000\n", "4: loader.prefetch_factor: must be an integer from 1 to 256"),
    ("[schedule]\nmax_lr = 1e300\n", "3: schedule.max_lr: must be a number > 0 and at most 1000 (got 1e+300)"),
])
def test_every_number_of_a_config_has_a_range(tmp_path, body, said):
    path = write_cfg(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        debtorch.load(path, warn_on_mismatch=False)
    assert str(exc.value).startswith(f"{path}:{said}")


def test_workers_and_processes_are_bounded_by_this_machine_unless_deliberate(tmp_path):
    storm = f"[loader]\nnum_workers = {LIMIT + 1}\n"
    with pytest.raises(ConfigError, match=rf"loader.num_workers: {LIMIT + 1} is more than this machine can run "
                                          rf"\(at most {LIMIT} here: 4 x {CPUS} usable CPUs"
                                          rf"(?: is {4 * CPUS}, below the floor of 32)?\); load it with "
                                          rf"debtorch.load\(..., oversubscribe=True\)"):
        debtorch.load(write_cfg(tmp_path, storm), warn_on_mismatch=False)
    # Processes x (1 + workers) is what starts processes: each alone may fit, together not.
    together = "[loader]\nnum_workers = 8\n[distributed]\nnproc = 8\n"
    with pytest.raises(ConfigError, match=r"8 process\(es\) x \(1 \+ 8 workers\) = 72 processes"):
        parse_config("schema_version = 1\n" + together, "t.toml", cpus=2)
    # Issue 23: the file cannot lift its own bound; only the code (or command line) that loads it.
    lifted = write_cfg(tmp_path, storm + "[limits]\noversubscribe = true\n")
    with pytest.raises(ConfigError, match="more than this machine can run"):
        debtorch.load(lifted, warn_on_mismatch=False)
    cfg = debtorch.load(lifted, warn_on_mismatch=False, oversubscribe=True)
    assert cfg.settings.num_workers == LIMIT + 1
    # Without a machine (a file checked elsewhere) only the ranges apply.
    assert parse_config("schema_version = 1\n" + together, "t.toml").settings.nproc == 8


def test_verify_train_config_is_bounded_by_this_machine(tmp_path):
    path = write_cfg(tmp_path, f"[loader]\nnum_workers = {LIMIT + 1}\n")
    said = one_line(runner.invoke(app, ["verify-train", "--config", path]))
    assert f"--config {path}:3: loader.num_workers: {LIMIT + 1} is more than this machine can run" in said
    said = one_line(runner.invoke(app, ["verify-train", "--nproc", str(LIMIT + 1)]))
    assert said.endswith("give --oversubscribe to allow it deliberately")


def test_tune_refuses_processes_beyond_the_machine_and_writes_only_what_loads(tmp_path, facts_file):
    out = tmp_path / "t.toml"
    for n in ("100000", "99999999999999999999"):
        said = one_line(runner.invoke(app, ["tune", "--facts", facts_file, "--nproc", n, "--write", str(out)]))
        assert said == f"debtorch tune: --nproc must be an integer from 1 to 65536 (got {n})"
    said = one_line(runner.invoke(app, ["tune", "--facts", facts_file, "--nproc", "33"]))
    assert said.startswith("debtorch tune: --nproc 33 is more than this machine can run (at most 32 here")
    assert not out.exists()
    res = runner.invoke(app, ["tune", "--facts", facts_file, "--nproc", "33", "--oversubscribe", "--write", str(out)])
    assert res.exit_code == 0, res.stderr
    cfg = load_config(str(out))   # the deliberate choice is recorded in the file ...
    assert cfg.oversubscribe and cfg.settings.nproc == 33
    with pytest.raises(ConfigError, match="33 is more than this machine can run"):
        load_config(str(out), cpus=2)   # ... but lifts nothing on a machine without its loader's word
    for name in ("--global-batch", "--micro-batch", "--epochs", "--steps"):
        said = one_line(runner.invoke(app, ["tune", "--facts", facts_file, name, str(2**63)]))
        assert f"{name} must be an integer from 1 to 2147483647" in said


def test_what_tune_writes_must_load_on_the_machine_it_was_tuned_for(tmp_path):
    rec = recommend(make_facts(cpus=2), Request())
    rec.settings = rec.settings.replace(num_workers=40)
    with pytest.raises(ConfigError, match="loader.num_workers: 40 is more than this machine can run"):
        config.write_config(str(tmp_path / "t.toml"), rec, {"usable_cpus": 2}, config.tuned_table("rules", CPU))
    assert not (tmp_path / "t.toml").exists()


# ---------------------------------------------------------------------------
# 2. Safe writes


def test_only_a_regular_file_is_replaced(tmp_path, facts_file):
    said = one_line(runner.invoke(app, ["tune", "--facts", facts_file, "--write", "/dev/null", "--force"]))
    assert said == "debtorch tune: /dev/null: is a character device; only a regular file is replaced"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.toml"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link.symlink_to(victim)
    for target, kind in ((fifo, "a FIFO"), (link, "a symbolic link")):
        with pytest.raises(outputs.OutputError, match=f"is {kind}; only a regular file is replaced"):
            outputs.write_atomic(str(target), "x", force=True)
    assert victim.read_text() == "keep" and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert manpage.main(["-o", "/dev/null"]) == 2   # the man page writer uses the same door
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.json", "fifo", "link.toml", "victim"]


def test_a_planted_link_at_the_old_temporary_name_is_never_written_through(tmp_path):
    pytest.importorskip("matplotlib")
    from debtorch.report.plot import plot
    from debtorch.verify import analysis
    from debtorch.verify.measure import Measured

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / ".p.svg.tmp").symlink_to(victim)   # what --plot p.svg used to open
    m = Measured()
    plot(m, analysis.summary(m), str(tmp_path / "p.svg"))
    assert victim.read_text() == "keep" and (tmp_path / "p.svg").read_text().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".p.svg.tmp", "p.svg", "victim"]


def test_temporary_files_are_created_exclusively_and_never_left(tmp_path, monkeypatch):
    made = []
    real = os.open

    def spy(path, flags, *a, **k):
        made.append((path, flags))
        return real(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    outputs.write_atomic(str(tmp_path / "a.toml"), "x = 1\n")
    [(tmp, flags)] = made   # the temporary file, the only file opened
    assert flags & os.O_EXCL and flags & os.O_NOFOLLOW and Path(tmp).parent == tmp_path
    with pytest.raises(outputs.OutputError, match="exists; use --force"):
        outputs.write_atomic(str(tmp_path / "a.toml"), "x = 2\n")
    assert [p.name for p in tmp_path.iterdir()] == ["a.toml"] and (tmp_path / "a.toml").read_text() == "x = 1\n"


def test_temporary_folders_are_removed_however_the_process_ends():
    path = outputs.temporary_folder("debtorch-test-")
    assert path in outputs.leftover() and os.path.isdir(path)
    outputs.remove_temporary()   # what the command line runs at exit and after a signal
    assert not os.path.exists(path) and path not in outputs.leftover()


# ---------------------------------------------------------------------------
# 4. Options


@pytest.mark.parametrize("args,said", [
    (["--measure", "--budget", "nan"], "--budget must be a number of seconds > 0 and at most 604800 (got nan)"),
    (["--measure", "--budget", "inf"], "--budget must be a number of seconds > 0 and at most 604800 (got inf)"),
    (["--budget", "60"], "--budget only applies to --measure or --workload (rules alone measure nothing)"),
    (["--workload", "builtin:cnn", "--budget", "10"], "--budget 10 is too small to measure anything; give at least 20 "
                                                      "seconds"),
    (["--write", ""], "--write needs a path (got an empty one)"),
    (["--write", "  "], "--write needs a path (got an empty one)"),
])
def test_tune_options(args, said):
    assert one_line(runner.invoke(app, ["tune", *args])) == f"debtorch tune: {said}"


@pytest.mark.parametrize("args,said", [
    (["--timeout", "nan"], "--timeout must be a number of seconds > 0 and at most 604800 (got nan)"),
    (["--seed", str(10**20)], "--seed must be an integer from 0 to 4294967295 (got 100000000000000000000)"),
    (["--nproc", "0"], "--nproc must be an integer from 1 to 65536 (got 0)"),   # tune's words, the same check
    (["--nproc", "2", "--master-port", "99999"], "--master-port must be a TCP port, 1 to 65535 (got 99999)"),
    (["--nproc", "2", "--node-rank", "5", "--nnodes", "2"], "--node-rank 5 is not a rank of 2 node(s): it must be from 0 to 1"),
    (["--nproc", "2", "--node-rank", "1"], "--node-rank 1 is not a rank of 1 node(s): it must be from 0 to 0 (give --nnodes)"),
    (["--plot", ""], "--plot needs a path (got an empty one)"),
    (["--config", ""], "--config needs a path (got an empty one)"),
])
def test_verify_train_options(args, said):
    assert one_line(runner.invoke(app, ["verify-train", *args])) == f"debtorch verify-train: {said}"


def test_other_commands_refuse_empty_paths():
    for args in (["facts", "--record", ""], ["doctor", "--facts", ""], ["facts", "--data", ""]):
        assert "needs a path (got an empty one)" in one_line(runner.invoke(app, args)), args


@pytest.mark.parametrize("command", ["facts", "doctor", "tune"])
def test_an_executable_that_is_not_python_is_bad_usage_everywhere(command):
    said = one_line(runner.invoke(app, [command, "--python", "/bin/true"]))
    assert said.endswith("--python /bin/true: not a Python interpreter debtorch can inspect (could not run "
                         "/bin/true: the probe printed no JSON)"), said


@pytest.mark.torch
def test_an_interpreter_that_is_not_python_is_bad_usage():
    said = one_line(runner.invoke(app, ["verify-train", "--quick", "--python", "/bin/true"]))
    assert said == ("debtorch verify-train: /bin/true did not start debtorch's worker (exited with status 0 while "
                    "starting): is it a Python 3 interpreter (--python)?")


# ---------------------------------------------------------------------------
# 8. Smaller


def test_debian_14_is_supported_not_older(tmp_path):
    host = make_host(tmp_path, base="debian13-workstation-rtx3080", files={
        "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 14 (forky)"\nNAME="Debian GNU/Linux"\nVERSION_ID="14"\n'
                           'VERSION="14 (forky)"\nVERSION_CODENAME=forky\nID=debian\n',
        "/etc/debian_version": "14.0\n"})
    assert "os.W002" not in ids(diagnose(host))
    assert debtorch.knowledge.debian_support("14") == "supported"
    assert debtorch.knowledge.debian_support("forky") == "supported"


def test_threads_explain_oversubscription_honestly():
    rec = recommend(make_facts(cpus=2), Request(nproc=1000, oversubscribe=True))
    text = rec.reasons["threads"].text
    assert "1000 process(es) x (1 thread(s) + 0 worker(s)) share 2 usable CPUs" in text and " fit " not in text
    assert " fit 2 usable CPUs" in recommend(make_facts(cpus=2), Request()).reasons["threads"].text
    with pytest.raises(RequestError, match="--nproc 1000 is more than this machine can run"):
        recommend(make_facts(cpus=2), Request(nproc=1000))


def test_a_global_batch_that_does_not_split_evenly_gets_its_note(facts_file):
    res = runner.invoke(app, ["tune", "--facts", facts_file, "--global-batch", "7", "--nproc", "4", "--json"])
    doc = json.loads(res.stdout)
    assert doc["settings"]["micro_batch"] == 2 and doc["global_batch"] == 8
    assert "tune.R023: global batch 7 is not a multiple of 4 process(es); using 8" in doc["notes"]
    assert "(gives 8, the nearest reachable)" in doc["reasons"]["micro_batch"]["text"]


# ---------------------------------------------------------------------------
# Issue 23: the small ones


@pytest.mark.parametrize("args,said", [
    (["fleet", "--timeout", "nan"], "debtorch fleet: --timeout must be a number of seconds > 0 and at most 604800 (got nan)"),
    (["fleet", "--timeout", "inf"], "debtorch fleet: --timeout must be a number of seconds > 0 and at most 604800 (got inf)"),
    (["fleet", "--probe", "--budget", "nan"], "debtorch fleet: --budget must be a number of seconds > 0 and at most 604800 (got nan)"),
    (["fleet", "--probe", "--budget", "inf"], "debtorch fleet: --budget must be a number of seconds > 0 and at most 604800 (got inf)"),
    (["fleet", "/dev/zero"], "debtorch fleet: /dev/zero: is a character device, not a facts document"),
    (["verify-train", "--quick", "--budget", "1e308"],
     "debtorch verify-train: --budget must be a number of seconds > 0 and at most 604800 (got 1e+308)"),
    (["verify-train", "--budget", "nan"], "debtorch verify-train: --budget must be a number of seconds > 0 and at most 604800 (got nan)"),
])
def test_every_option_is_bounded_before_any_work(args, said):
    assert one_line(runner.invoke(app, args)) == said


def test_a_name_too_long_for_the_filesystem_is_one_line(tmp_path):
    said = one_line(runner.invoke(app, ["facts", "--record", str(tmp_path / ("x" * 300))]))
    assert said.endswith("x: File name too long")


@pytest.mark.parametrize("body", ['[minimums]\ndriver = "1.{digits}"\n', "[minimums]\ndriver = {digits}\n"])
def test_a_number_of_5000_digits_in_a_site_config_is_one_line(tmp_path, body):
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(body.format(digits="9" * 5001))
    said = one_line(runner.invoke(app, ["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", str(cfg)]))
    assert str(cfg) in said and len(said) < 300


def test_a_number_of_5000_digits_in_a_config_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        debtorch.load(write_cfg(tmp_path, f"[loader]\nnum_workers = {'9' * 5001}\n"))


def test_a_relative_cache_folder_is_never_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEBTORCH_CACHE", "cache")
    assert os.path.isabs(outputs.cache_dir()) and not outputs.cache_dir().startswith(str(tmp_path))


# -- issue 30: the low items ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec, said", [
    ("sim:5e-324", "sim:RATE must be a number from 0.01 to 1e+09 samples/s (got '5e-324')"),
    ("sim:nan", "(got 'nan')"), ("sim:inf", "(got 'inf')"), ("sim:1e300", "(got '1e300')"),
    ("sim:100,gbps=nan", "gbps must be a number from 0.001 to 10000 (got 'nan')"),
    ("sim:100,launch=1e400", "launch must be a number from 0 to 1000"),
    ("sim:100,ahead=99999999999999999999999", "ahead must be a number from 1 to 1024"),
    ("sim:100,launch=1,launch=2", "'launch' is given twice; give each parameter once"),
    ("sim:100,sync=1,sync=0", "'sync' is given twice"),
    ("sim:100,name=" + "a" * 5000, "a simulated device's spec is at most 512 characters (got 5013)"),
    ("sim:100,name=" + "a" * 65, "unknown or bad parameter 'name=aaaa"),
    ("sim:100,name=caf\u00e9", "unknown or bad parameter 'name=caf\u00e9'")])
@pytest.mark.parametrize("command", ["verify-train", "tune"])
def test_a_simulated_device_that_cannot_run_is_refused_when_parsed(spec, said, command):
    res = runner.invoke(app, [command, "--device", spec, "--json"] + (["--facts", "/nonexistent"] if command == "tune"
                                                                        else []))
    assert said in one_line(res), res.stderr
    assert len(res.stderr) < 400                      # the 5,000 characters are not repeated back


def _findings_folder(tmp_path, monkeypatch, name="watch.toml", text=None):
    """A copy of checks/findings/ where ``name`` holds ``text``; the catalogue is read from it."""
    import shutil

    from debtorch import findings
    root = tmp_path / "checks"
    # The folder the catalogue is read from: the source tree's, or the installed package's (autopkgtest).
    shipped = next(d for d in findings.DATA_DIRS if (d / "findings").is_dir())
    shutil.copytree(shipped / "findings", root / "findings")
    if text is not None:
        (root / "findings" / name).write_text(text)
    monkeypatch.setattr(findings, "DATA_DIRS", (root,))
    findings.catalogue.cache_clear()
    return root / "findings" / name


@pytest.fixture
def fresh_catalogue():
    from debtorch import findings
    findings.catalogue.cache_clear()
    yield
    findings.catalogue.cache_clear()


WATCH_TOML = (Path(__file__).resolve().parent.parent / "checks" / "findings" / "watch.toml").read_text()


@pytest.mark.parametrize("text, said", [
    (WATCH_TOML.replace('title = "fine"', 'title = 7'), "watch.toml:26: watch.I001.title: must be a string (got 7)"),
    (WATCH_TOML.replace('title = "fine"', 'title = "fine"\ntitel = "fine"'), "watch.I001.titel: unknown key"),
    (WATCH_TOML.replace("[watch.I002]", "[watch.X002]"), "watch.X002: not an id's code like W001"),
    (WATCH_TOML.replace('page = "runtime.md"', ""), "page: missing"),
    (WATCH_TOML.replace('page = "runtime.md"', 'page = "../../etc/passwd"'), "page: must be a page of docs/"),
    (WATCH_TOML + '\n[watch.I001]\ntitle = "again"\n', "not valid TOML"),
    (WATCH_TOML.replace("[watch.I002]", "[cpu.W001]"), "cpu.W001: declared twice"),
    ("\x00\x01binary", "binary data, not text")])
def test_a_malformed_findings_catalogue_is_one_line_and_exit_2(tmp_path, monkeypatch, fresh_catalogue, text, said):
    path = _findings_folder(tmp_path, monkeypatch, text=text)
    said_now = one_line(runner.invoke(app, ["doctor", "--host", str(HOSTS / "debian12-nouveau-gtx1070ti")]))
    assert said in said_now and str(path.parent) in said_now, said_now


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_findings_catalogue_that_is_not_a_regular_file_is_refused_at_once(tmp_path, monkeypatch, fresh_catalogue,
                                                                             kind):
    path = _findings_folder(tmp_path, monkeypatch)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)                                   # read, it would wait for a writer forever
    else:
        path.symlink_to(kind)                             # read, it would grow without end
    said = one_line(runner.invoke(app, ["lint", str(HOSTS.parent / "lint_corpus" / "article_amp.py")]))
    assert said.endswith(f"{path}: is {'a FIFO' if kind == 'fifo' else 'a character device'}, "
                         "not a findings catalogue"), said


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_threshold_that_is_not_a_finite_number_is_refused(tmp_path, monkeypatch, value):
    import shutil

    from debtorch import knowledge
    folder = tmp_path / "checks"
    shutil.copytree(knowledge.checks_dir(), folder)
    text = (folder / "thresholds.toml").read_text()
    at = text.index('name = "dataloader_time_fraction_warn"')
    start = text.index("value = ", at)
    (folder / "thresholds.toml").write_text(text[:start] + f"value = {value}" + text[text.index("\n", start):])
    monkeypatch.setenv(knowledge.ENV_DIR, str(folder))
    said = one_line(runner.invoke(app, ["doctor", "--host", str(HOSTS / "debian12-vm-2core")]))
    assert f"value: must be a string or a finite number (got {value})" in said, said


@pytest.mark.parametrize("value", ["8", '"8"', '"4096"', '"8 X"'])
def test_a_bare_number_for_the_site_shm_minimum_is_refused_not_taken_as_bytes(tmp_path, value):
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(f"[minimums]\nshm = {value}\n")
    said = one_line(runner.invoke(app, ["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", str(cfg)]))
    assert said.endswith(f'doctor.toml:2: minimums.shm: must be a size with its unit, like "8G" or "512M" '
                         f"(a bare number would be bytes) (got {value})"), said


@pytest.mark.parametrize("value, applies", [('"64G"', True), ('"1K"', False), ('"4096B"', False)])
def test_a_site_shm_minimum_with_its_unit_is_applied(tmp_path, value, applies):
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(f"[minimums]\nshm = {value}\n")
    res = runner.invoke(app, ["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", str(cfg), "--json"])
    assert ("site.W001" in {f["id"] for f in json.loads(res.stdout)["findings"]}) == applies


@pytest.fixture
def loop(tmp_path):
    """A symbolic link loop: a -> b -> a."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return str(tmp_path / "a")


@pytest.mark.parametrize("args, said", [
    (["lint", "{loop}"], "{loop}: a loop of symbolic links"),
    (["doctor", "--facts", "{loop}"], "--facts {loop}: cannot read (a loop of symbolic links)"),
    (["doctor", "--host", "{loop}"], "--host {loop}: a loop of symbolic links"),
    (["facts", "--record", "{loop}"], "--record {loop}: is a loop of symbolic links; record into a new or empty folder"),
    (["fleet", "{loop}"], "{loop}: cannot read (a loop of symbolic links)"),
    (["verify-train", "--config", "{loop}"], "--config {loop}: cannot read (a loop of symbolic links)"),
    (["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", "{loop}"],
     "{loop}: cannot read (a loop of symbolic links)")])
def test_a_symbolic_link_loop_is_reported_as_one(loop, args, said):
    res = runner.invoke(app, [a.format(loop=loop) for a in args])
    assert one_line(res).endswith(said.format(loop=loop))
    assert not list(Path(loop).parent.glob(".*recording*"))     # --record left nothing beside it
