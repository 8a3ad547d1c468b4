"""Results are typed values whose ``to_json`` writes what debtorch wrote before they were typed: documents
recorded by real runs (tests/recorded/README.md) are read back, recomputed and written again, and must come
out exactly as recorded, text report included."""

import json
import math
import random
from pathlib import Path

import pytest
from tune_facts import make_facts

from debtorch import fingerprint
from debtorch.report import jsonout
from debtorch.report.tune import TuneView
from debtorch.report.verify import VerifyView
from debtorch.train.device import Device
from debtorch.train.result import LoadedWorkload, TrialResult
from debtorch.tune import watch as watch_mod
from debtorch.tune.calibration import Calibration
from debtorch.tune.measure import MeasureOptions, measure
from debtorch.tune.prescribe import read_watch
from debtorch.tune.rules import Request, recommend
from debtorch.tune.run import Tuned
from debtorch.verify import analysis
from debtorch.verify.measure import Measured
from debtorch.verify.run import Outcome, TunedBy

RECORDED = Path(__file__).resolve().parent / "recorded"
VERIFY = ("verify-quick-cpu", "verify-quick-sim", "verify-quick-ddp", "verify-full")


def _outcome(doc: dict) -> Outcome:
    m = Measured.from_json(doc)
    summary = analysis.summary(m)
    verdict = analysis.verdict(summary, m.plan) if summary.measured_anything else ""
    config = TunedBy.from_json(doc["config"]) if doc["config"] else None
    return Outcome(m, summary, verdict, doc["warnings"], config, doc["facts"], None)


def _plain(doc: dict) -> dict:
    out = json.loads(jsonout.dumps(doc))
    out.pop("debtorch_version")
    return out


def same(got, recorded) -> bool:
    """``got`` is ``recorded``: equal keys, lists, strings and integers; floats to 12 significant digits
    (a mean's last bits differ between Python 3.11's statistics module and 3.13's, Debian 13's)."""
    if isinstance(got, float) and isinstance(recorded, float):
        return math.isclose(got, recorded, rel_tol=1e-12, abs_tol=1e-300)
    if isinstance(got, dict) and isinstance(recorded, dict):
        return got.keys() == recorded.keys() and all(same(got[k], recorded[k]) for k in got)
    if isinstance(got, list) and isinstance(recorded, list):
        return len(got) == len(recorded) and all(same(a, b) for a, b in zip(got, recorded))
    return type(got) is type(recorded) and got == recorded


def test_same_tells_a_changed_figure_from_a_last_bit():
    assert same({"a": [1, 0.1 + 0.2]}, {"a": [1, 0.3]}) and same(float("nan"), float("nan")) is False
    assert not same({"a": 0.3001}, {"a": 0.3}) and not same({"a": 1}, {"a": 1.0}) and not same({"a": 1}, {"b": 1})


@pytest.mark.parametrize("name", VERIFY)
def test_a_recorded_verify_train_document_is_recomputed_and_written_exactly(name):
    doc = json.loads((RECORDED / f"{name}.json").read_text())
    o = _outcome(doc)
    assert same(_plain(VerifyView(o, doc["exit_code"]).document()), _plain(doc))
    assert same(json.loads(jsonout.dumps(o.summary.to_json())), doc["summary"])


@pytest.mark.parametrize("name", VERIFY)
@pytest.mark.parametrize("verbose", [False, True])
def test_a_recorded_verify_train_run_reads_as_it_did(name, verbose):
    doc = json.loads((RECORDED / f"{name}.json").read_text())
    lines = VerifyView(_outcome(doc), doc["exit_code"], verbose=verbose).lines()
    expected = (RECORDED / f"{name}{'.verbose' if verbose else ''}.lines").read_text().splitlines()
    assert [repr(x) for x in lines] == expected


# ---------------------------------------------------------------------------- tune


SIM = Device.parse("sim:1000,launch=1,gbps=25,ahead=3,sync=0")


class FakeEngine:
    """The engine's trial API on a formula and a fake clock (the recorded documents were made with it)."""

    def __init__(self, f, step_overhead=0.2, batch=32):
        self.f, self.overhead, self.batch = f, step_overhead, batch
        self.rng = random.Random(0)
        self.now = 0.0
        self.info = LoadedWorkload(batch_size=batch, convolutional=True)

    def clock(self):
        return self.now

    def trial(self, settings, steps, warmup):
        sps = self.f(settings) * math.exp(self.rng.gauss(0, 0.02))
        self.now += self.overhead + (steps + warmup) * self.batch / sps
        return TrialResult(samples_per_s=sps, data_wait_share=0.05, wall_s=steps * self.batch / sps, steps=steps)


def _like_this_vm(s):
    v = 60.0 * (1.7 if s.precision == "bf16" else 1.0) * (1.1 if s.channels_last else 1.0)
    v *= 1.0 if (s.threads or 2) == 2 else 0.6
    return v * (0.8 ** s.num_workers)


def _measured(f, budget):
    facts = make_facts(cpus=2, features={"avx512_bf16": True}, torch="2.13.0+cpu", torch_cuda=None)
    rec = recommend(facts)
    engine = FakeEngine(f)
    opts = MeasureOptions(budget_s=budget)
    result = measure(rec, facts, opts, trials=engine, clock=engine.clock)
    return Tuned(rec, fingerprint.from_facts(facts), result, opts)


def _calibrated():
    cal = Calibration(device=SIM, micro_batch=32, loader_rate=500.0, in_process_rate=450.0, main_batch_s=0.001,
                      device_rate=1000.0, device_source="simulated", threads=1, batch_bytes=1_573_120, fetch_s=0.064,
                      fetch_p90_s=0.07, worker_rate=480.0, worker_kept_up=False, seconds=12.0, trials=3)
    facts = make_facts(cpus=8)
    rec = recommend(facts, Request(device=SIM, calibration=cal))
    return Tuned(rec, fingerprint.from_facts(facts), options=MeasureOptions(workload="builtin:images", search=False))


def _watched():
    w = read_watch(str(RECORDED / "watch-input-bound.jsonl"))
    facts = make_facts(cpus=8, gpus=[("NVIDIA A100-SXM4-80GB", "8.0")])
    return Tuned(recommend(facts, Request(device=w.device, watch=w)), fingerprint.from_facts(facts))


TUNED = {"tune-measured": lambda: _measured(_like_this_vm, 300), "tune-within-noise": lambda: _measured(_fast, 200),
         "tune-calibrated-sim": _calibrated, "tune-watch": _watched}


def _fast(s):
    return 60.0


@pytest.mark.parametrize("name", list(TUNED))
def test_tune_writes_its_recorded_document_and_report_exactly(name):
    tuned = TUNED[name]()
    recorded = json.loads((RECORDED / f"{name}.json").read_text())
    assert json.loads(jsonout.dumps(TuneView(tuned).document())) == recorded
    for verbose in (False, True):
        expected = (RECORDED / f"{name}{'.verbose' if verbose else ''}.lines").read_text().splitlines()
        assert [repr(x) for x in TuneView(tuned, verbose=verbose).lines()] == expected
    assert TuneView(tuned).env() == (RECORDED / f"{name}.env").read_text()


# ---------------------------------------------------------------------------- cfg.watch


def _verdict(line: dict) -> watch_mod.Verdict:
    """The verdict a recorded line says (rank 0's merged with the others' summaries where it has ranks)."""
    if "ranks" not in line:
        s = watch_mod.WatchSummary.from_json(line)
        return watch_mod.Verdict(s, watch_mod.judge(s), line["final"])
    mine, *others = line["ranks"]
    s = watch_mod.WatchSummary.from_json(mine)
    peers = {r["rank"]: watch_mod.WatchSummary.from_json(r) for r in others}
    return watch_mod._merge(watch_mod.Verdict(s, watch_mod.judge(s), line["final"]), peers, line.get("ranks_missing", []))


@pytest.mark.parametrize("i", range(6))
def test_a_recorded_watch_line_is_written_and_said_again_exactly(i, monkeypatch):
    monkeypatch.setattr(watch_mod, "PEER_WAIT_S", 0.3)   # as it was recorded: rank 0 waited 0.3 s for the others
    recorded = json.loads((RECORDED / "watch-lines.json").read_text())[i]
    v = _verdict(recorded["json"])
    assert json.loads(json.dumps(v.to_json(), sort_keys=True, default=str)) == recorded["json"]
    assert watch_mod.render(v) == recorded["text"]
