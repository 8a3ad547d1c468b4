"""Whether the machine was busy while debtorch measured (issue 34, item 5): the load average and the
stolen CPU time, read through the Host before and after measuring, said in a warning line and in the
JSON of tune --measure and verify-train."""

import json

from hostkit import make_host
from hypothesis import given
from hypothesis import strategies as st

from debtorch.facts import loadavg
from debtorch.facts.loadavg import Reading, judge, parse_cpu_ticks, parse_loadavg
from debtorch.report.tune import TuneView
from debtorch.report.verify import VerifyView
from debtorch.train.device import CPU
from debtorch.train.settings import Settings
from debtorch.tune.run import Tuned, load_check
from debtorch.verify import analysis
from debtorch.verify.measure import Measured, Plan
from debtorch.verify.run import Outcome, Prepared

# /proc/loadavg and the head of /proc/stat as a Debian 12 VM (kernel 6.1) wrote them.
LOADAVG = "5.38 2.26 0.89 7/412 10138\n"
STAT = ("cpu  96127 412 20431 215034 1310 0 1877 4206 0 0\n"
        "cpu0 48021 201 10317 107302 655 0 1120 2101 0 0\n"
        "cpu1 48106 211 10114 107732 655 0 757 2105 0 0\n"
        "intr 2862044 0 9 0 0 0\nctxt 5519830\n")


def test_the_parsers_read_what_the_kernel_writes():
    assert parse_loadavg(LOADAVG) == 5.38
    assert parse_cpu_ticks(STAT) == (4206, 96127 + 412 + 20431 + 215034 + 1310 + 0 + 1877 + 4206)
    assert parse_loadavg("") is None and parse_loadavg("x y z") is None
    assert parse_cpu_ticks("cpu0 1 2 3 4 5 6 7 8\n") == (None, None)   # no aggregate line
    assert parse_cpu_ticks("cpu  1 2 3\n") == (None, None)               # a kernel before steal (2.6.11)


@given(st.text())
def test_the_parsers_never_raise(text):
    parse_loadavg(text)
    parse_cpu_ticks(text)


def test_readings_go_through_the_host(tmp_path):
    host = make_host(tmp_path, files={"/proc/loadavg": LOADAVG, "/proc/stat": STAT})
    assert loadavg.read(host) == Reading(5.38, 4206, 339397)
    bare = make_host(tmp_path, remove=("/proc/loadavg", "/proc/stat"), name="bare")
    assert loadavg.read(bare) == Reading(None, None, None)   # a replayed host never falls back to the live one


def test_busy_is_others_load_before_after_beyond_the_measurements_own_tasks_or_stolen_time():
    quiet = Reading(0.2, 100, 10_000)
    assert not judge(quiet, Reading(2.1, 110, 20_000), 2, own=2, per_cpu=0.5, steal=0.05).busy
    busy = judge(Reading(5.4, 100, 10_000), Reading(6.1, 1100, 20_000), 2, own=2, per_cpu=0.5, steal=0.05)
    assert busy.reasons == ("load average 5.4 on 2 usable CPUs before measuring",
                            "load average 6.1 after it, 4.1 beyond the 2 tasks the measurement ran",
                            "the hypervisor took 10% of the CPU time")
    assert busy.warning().startswith("the machine was busy while measuring (load average 5.4 on 2 usable CPUs")
    assert busy.to_json() == {"usable_cpus": 2, "own": 2, "load_before": 5.4, "load_after": 6.1,
                              "steal_share": 0.1, "busy": True, "reasons": list(busy.reasons)}
    unknown = judge(Reading(None, None, None), Reading(None, None, None), 2, 2, 0.5, 0.05)
    assert not unknown.busy and unknown.steal_share is None


BUSY = load_check(Reading(5.4, 100, 10_000), Reading(6.1, 100, 20_000), 2, 2)


def test_tune_measure_says_the_machine_was_busy_in_a_warning_line_and_its_json():
    from tune_facts import make_facts

    from debtorch.tune.rules import Request, recommend
    from debtorch.tune.search import Result

    rec = recommend(make_facts(cpus=2, torch="2.13.0+cpu", torch_cuda=None), Request())
    result = Result(best=rec.settings, start=rec.settings, budget=120.0, spent=100.0)
    view = TuneView(Tuned(rec, {}, result, load=BUSY), settings=False)
    lines = [line.text for line in view.lines()]
    assert f"warning: {BUSY.warning()}" in lines
    assert view.document()["measurement"]["load"]["busy"] is True


def test_verify_train_says_the_machine_was_busy_and_reads_the_load_through_its_host(tmp_path):
    host = make_host(tmp_path, files={"/proc/loadavg": LOADAVG, "/proc/stat": STAT})
    m = Measured(plan=Plan(workload="builtin:cnn"), device=CPU)
    m.baseline, m.tuned = Settings(), Settings(num_workers=1)
    from hostkit import facts_of

    facts = facts_of(host)
    ready = Prepared(options=None, plan=None, cfg=None, facts=facts, host=host, load_before=Reading(5.4, 100, 10_000))
    busy = ready._load_check(m)
    assert busy.busy and busy.own == 3 and busy.after == 5.38   # 2 threads (PyTorch's default here) + 1 worker
    outcome = Outcome(m, analysis.summary(m), "no speed-up measured", [busy.warning()], None, facts, busy)
    view = VerifyView(outcome, 0)
    assert any(line.text == f"warning: {busy.warning()}" for line in view.lines()[1:])
    assert json.loads(json.dumps(view.document()))["load"]["reasons"][0].startswith("load average 5.4")
