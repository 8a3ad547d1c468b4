"""``debtorch.watch`` / ``cfg.watch``: the data-wait share of a real loop, host syncs, the verdict, DDP's spread.

Loops of known speed (sleeps long enough to hold on a loaded 2-CPU machine) give the share the
arithmetic predicts; the CUDA path runs on a fake GPU whose events complete two records late
(benchmarks/watch_cuda_check.py runs it on a real one).
"""

import io
import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from types import SimpleNamespace

import pytest
from clitools import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import debtorch
from debtorch import stats
from debtorch.hostwaits import SYNC_WARNING
from debtorch.tune import watch as watch_mod
from debtorch.tune.watch import count_samples


def sleepy(n, seconds, item=lambda i: [i, i, i, i], took=None):
    for i in range(n):
        t = time.perf_counter()
        time.sleep(seconds)
        if took is not None:
            took.append(time.perf_counter() - t)
        yield item(i)


def run(loader, step_s, took=None, **options):
    """Iterate ``loader`` watched, each step sleeping ``step_s``; (JSON records, text lines)."""
    out, text = io.StringIO(), io.StringIO()
    for _ in debtorch.watch(loader, json=out, file=text, **options):
        t = time.perf_counter()
        time.sleep(step_s)
        if took is not None:
            took.append(time.perf_counter() - t)
    return [json.loads(x) for x in out.getvalue().splitlines()], text.getvalue()


@pytest.mark.parametrize("fetch_s, step_s", [(0.06, 0.03), (0.015, 0.135)])
def test_a_loader_of_known_speed_gives_the_share_the_arithmetic_predicts(fetch_s, step_s):
    fetched, stepped = [], []
    records, text = run(sleepy(25, fetch_s, took=fetched), step_s, took=stepped, every=0)
    final = records[-1]
    assert final["final"] and final["steps"] == 24 and final["timing"] == "host clock"
    d = final["data_wait"]
    assert abs(d["share"] - fetch_s / (fetch_s + step_s)) < 0.05, d        # the arithmetic, on the nominal sleeps
    took = sum(fetched[1:]) / (sum(fetched[1:]) + sum(stepped[1:]))
    assert abs(d["share"] - took) < 0.02, (d, took)                         # and on the sleeps as they ran
    assert d["low"] <= d["share"] <= d["high"] and d["windows"] == 3
    assert final["samples_per_s"] == pytest.approx(4 * final["steps_per_s"])
    assert final["syncs_per_step"] is None and "host syncs not counted" in text
    ids = [f["id"] for f in final["findings"]]
    assert ids == ["watch.W001"]          # both shares lie far above the 5% threshold
    assert text.splitlines()[0].startswith("watch (end): 24 steps")
    assert "debtorch tune --measure --workload" in text


def test_a_fast_loader_is_fine_and_every_counts_steps():
    records, text = run([{"x": [1, 2]}] * 32, 0.01, every=10)
    assert [r["steps"] for r in records] == [10, 20, 30, 31] and [r["final"] for r in records][-1]
    assert records[-1]["data_wait"]["high"] < 0.05
    assert [f["id"] for f in records[-1]["findings"]] == ["watch.I001"]
    assert records[-1]["samples_per_s"] is None or records[-1]["samples_per_s"] > 0   # {"x": [1, 2]}: 2 a batch


def test_too_few_steps_are_not_resolved_never_fine():
    records, _ = run([[1]] * 5, 0.001, every=0)
    assert [f["id"] for f in records[-1]["findings"]] == ["watch.I002"]


def test_nothing_is_printed_or_written_with_every_0_and_the_verdict_off(tmp_path, capsys):
    log = tmp_path / "watch.log"
    for _ in debtorch.watch(sleepy(12, 0.001), every=0, verdict=False, file=str(log)):
        pass
    assert capsys.readouterr() == ("", "") and not log.exists()


def test_lines_are_appended_to_a_log_file_never_truncating_it(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("the user's own line\n")
    for _ in debtorch.watch([[0]] * 22, every=10, file=str(log)):
        pass
    lines = log.read_text().splitlines()
    assert lines[0] == "the user's own line" and lines[1].startswith("watch: 10 steps")
    assert any(line.startswith("watch (end): 21 steps") for line in lines)
    assert str(tmp_path) not in log.read_text() and socket.gethostname() not in log.read_text().replace(
        "the user's own line", "")


def test_an_exception_in_the_loop_closes_the_iterator_and_reports_rank_locally():
    closed, text = [], io.StringIO()

    def batches():
        try:
            for i in range(100):
                yield [i]
        finally:
            closed.append(True)

    with pytest.raises(RuntimeError, match="boom"):
        for i, _ in enumerate(debtorch.watch(batches(), every=0, file=text)):
            if i == 12:
                raise RuntimeError("boom")
    assert closed == [True]
    assert text.getvalue().startswith("watch (left early): 12 steps")


def test_the_wrapper_passes_len_and_attributes_through():
    class Loader(list):
        sampler = "the sampler"

    w = debtorch.watch(Loader([[1], [2]]), every=0)
    assert len(w) == 2 and w.sampler == "the sampler"
    with pytest.raises(AttributeError):
        w.missing


@pytest.mark.parametrize("bad, message", [
    (dict(every="soon"), "every must be"), (dict(every=-1), "every must be"), (dict(batch_size=0), "batch_size"),
    (dict(timer=True, every=10), "timer=True needs")])
def test_bad_options_are_one_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        debtorch.watch([], **bad)


def test_the_timer_prints_while_a_step_hangs():
    text = io.StringIO()
    for _ in debtorch.watch([[0]] * 3, every="0.2s", timer=True, file=text, verdict=False):
        time.sleep(0.5)
    assert text.getvalue().count("watch: ") >= 2


def test_ratio_of_sums_interval():
    assert stats.ratio_of_sums([1, 1, 1], [4, 4, 4]) == (0.25, 0.25, 0.25)
    r, low, high = stats.ratio_of_sums([1, 2, 1, 2], [4, 4, 4, 4])
    assert r == 0.375 and low < r < high
    assert stats.ratio_of_sums([1], [2]) == (0.5, None, None) and stats.ratio_of_sums([], []) == (None, None, None)


batches = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=3), st.floats()),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                                               st.dictionaries(st.text(max_size=2), inner, max_size=3)),
                       max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(batches, st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.none()))
def test_any_batch_and_any_every_never_raise_unexpectedly(batch, every):
    n = count_samples(batch)
    assert n is None or n >= 0
    try:
        watch_mod._every(every)
    except ValueError:
        pass


def test_count_samples_reads_the_first_tensor_of_a_batch():
    arr = SimpleNamespace(shape=(32, 3, 8, 8))
    assert count_samples({"image": arr, "label": [0] * 32}) == 32
    assert count_samples((arr, arr)) == 32 and count_samples([arr, arr]) == 32
    assert count_samples([["a", "b", "c"], arr]) == 3 and count_samples([1, 2, 3, 4, 5]) == 5
    assert count_samples(SimpleNamespace(shape=())) is None and count_samples(object()) is None


def test_importing_and_watching_plain_batches_never_imports_torch():
    code = ("import sys, debtorch\n"
            "for _ in debtorch.watch([[1, 2]] * 3, every=0, verdict=False): pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


# -- CUDA, on a fake GPU -------------------------------------------------------------------------------


class FakeGpu:
    """torch.cuda with a GPU clock the test moves; an event completes two records after its own."""

    def __init__(self):
        self.now, self.recorded, self.done, self.mode, self.synchronized, self.unready_reads = 0.0, 0, 0, 0, 0, 0

    def is_initialized(self):
        return True

    def get_sync_debug_mode(self):
        return self.mode

    def set_sync_debug_mode(self, mode):
        self.mode = mode

    def Event(self, enable_timing=False):
        assert enable_timing
        return FakeEvent(self)

    def op_that_syncs(self):   # stands for .item() in the user's step
        if self.mode == "warn":
            warnings.warn(SYNC_WARNING)


class FakeEvent:
    def __init__(self, gpu):
        self.gpu = gpu

    def record(self):
        self.t, self.n = self.gpu.now, self.gpu.recorded
        self.gpu.recorded += 1

    def query(self):
        return self.n < max(self.gpu.done, self.gpu.recorded - 2)

    def elapsed_time(self, other):
        if not (self.query() and other.query()):
            self.gpu.unready_reads += 1
        return (other.t - self.t) * 1000.0

    def synchronize(self):
        self.gpu.synchronized += 1
        self.gpu.done = self.gpu.recorded


def test_on_cuda_the_share_comes_from_events_read_lazily_and_syncs_are_counted(monkeypatch):
    gpu = FakeGpu()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=gpu))

    class Loader:
        def __iter__(self):
            for i in range(21):
                gpu.now += 0.010          # the GPU idles 10 ms while the batch comes
                yield {"x": SimpleNamespace(shape=(16, 3))}

    out, pending, modes = io.StringIO(), [], []
    w = debtorch.watch(Loader(), every=0, json=out, file=io.StringIO())
    for epoch in range(2):
        for _ in w:
            gpu.now += 0.030              # the step's kernels
            gpu.op_that_syncs()
            pending.append(len(w._pending))
            with pytest.warns(UserWarning, match="unrelated"):
                warnings.warn("unrelated")    # the user's own warnings still show
        modes.append(gpu.mode)
    first, final = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["timing"] == final["timing"] == "cuda events" and (first["steps"], final["steps"]) == (20, 41)
    assert final["data_wait"]["share"] == pytest.approx(0.25)      # 10 / (10 + 30), not the host's clock
    assert final["syncs_per_step"] == 1.0 and final["steps_with_sync"] == 41   # the second pass counted too
    assert [f["id"] for f in final["findings"]] == ["watch.W001", "watch.W002"]
    assert gpu.synchronized == 2 and gpu.unready_reads == 0          # one sync per verdict; never a blocking read
    assert max(pending) <= watch_mod.CHUNK + 2                        # read a few steps late, during the loop
    assert modes == [0, 0]                                            # the debug mode is put back after each pass


# -- with PyTorch ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.torch
def test_an_exception_leaves_no_dataloader_worker_behind():
    import torch

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(64.0)), batch_size=4,
                                         num_workers=1)
    with pytest.raises(RuntimeError):
        for i, (x,) in enumerate(debtorch.watch(loader, every=0, verdict=False)):
            assert x.shape == (4,)
            if i == 2:
                raise RuntimeError("boom")
    assert multiprocessing.active_children() == []
    assert sum(len(x) for (x,) in loader) == 64    # the loader still works


DDP_SCRIPT = textwrap.dedent("""\
    import time, torch, torch.distributed as dist, debtorch
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def loader():
        for i in range(26):
            time.sleep(0.04 if rank == 1 else 0.0)   # rank 1 reads its data slowly
            yield torch.zeros(8, 2)

    flag = torch.zeros(1)
    for x in debtorch.watch(loader(), every=0):
        dist.all_reduce(flag)                        # the ranks step together, as DDP's all-reduce makes them
        time.sleep(0.01)
    dist.destroy_process_group()
    """)


@pytest.mark.slow
@pytest.mark.torch
def test_ddp_rank_0_prints_the_spread_across_ranks(tmp_path):
    script = tmp_path / "ddp_watch.py"
    script.write_text(DDP_SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    (_, err0), (_, err1) = (p.communicate(timeout=120) for p in procs)
    assert [p.returncode for p in procs] == [0, 0], err0 + err1
    assert err1 == ""                                  # only rank 0 prints
    lines = err0.splitlines()
    assert lines[0].startswith("watch (end): 25 steps")
    spread = re.match(r"watch ranks: 2, data wait (\d+)%-(\d+)% \(slowest: rank 1\)", lines[1])
    assert spread and int(spread[1]) < 20 and int(spread[2]) > 60, lines[1]   # 0.04 / (0.04 + 0.01) = 80%
    assert lines[1].endswith("samples/s in all")
    assert lines[2].startswith("watch.W001 rank 1: input-bound")


def test_a_line_that_cannot_be_written_never_stops_the_loop(capsys):
    class Full(io.StringIO):
        def write(self, text):
            raise OSError(28, "No space left on device")

    steps = sum(1 for _ in debtorch.watch([[0]] * 25, every=10, file=Full()))
    assert steps == 25 and "watch: no line (OSError: [Errno 28] No space left on device)" in capsys.readouterr().err


def test_a_log_in_a_missing_folder_is_refused_at_once(tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        debtorch.watch([], file=str(tmp_path / "nowhere" / "watch.log"))
