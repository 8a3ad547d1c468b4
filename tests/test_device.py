"""A device is parsed once, where it enters (debtorch/train/device.py): cpu, cuda, cuda:N or a simulated
accelerator; what a layer below asks of it is an attribute, never a string test."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from debtorch.cli.shared import parse_device
from debtorch.train import sim
from debtorch.train.device import CPU, CUDA, Device

ROWS = {"sim_launch_ms": {"value": 1.0}, "sim_gbps": {"value": 25.0}, "sim_ahead": {"value": 3},
        "sim_preset_a100": {"value": 2470}}


@pytest.mark.parametrize("text, kind, index, rate", [
    ("cpu", "cpu", None, None), ("cuda", "cuda", None, None), ("cuda:0", "cuda", 0, None), ("cuda:3", "cuda", 3, None),
    ("sim:500,launch=1,gbps=25,ahead=3,sync=0", "sim", None, 500.0)])
def test_each_kind_of_device_reads_and_writes_its_canonical_text(text, kind, index, rate):
    d = Device.parse(text)
    assert (d.kind, d.index, d.rate) == (kind, index, rate) and str(d) == text and Device.parse(str(d)) == d
    assert d.is_cpu == (kind == "cpu") and d.is_cuda == (kind == "cuda") and d.simulated == (kind == "sim")
    assert d.accelerator == (kind != "cpu") and d.real_kind == ("cpu" if kind == "cpu" else "cuda")


def test_a_simulated_accelerator_takes_its_defaults_and_presets_from_checks():
    assert str(Device.parse("sim:a100,ahead=2", ROWS)) == "sim:2470,launch=1,gbps=25,ahead=2,sync=0,name=a100"
    assert str(parse_device("sim:800")) == "sim:800,launch=1,gbps=25,ahead=3,sync=0"   # checks/thresholds.toml's
    assert sim.from_thresholds(ROWS) == ({"launch_ms": 1.0, "gbps": 25.0, "ahead": 3}, {"a100": 2470.0})
    with pytest.raises(ValueError, match="no value for launch_ms, gbps, ahead"):
        Device.parse("sim:800")   # a request's spec is complete: the worker never guesses a default


@pytest.mark.parametrize("text, says", [
    ("tpu", "must be cpu, cuda, cuda:N or sim:RATE (got 'tpu')"), ("cuda:01", "(got 'cuda:01')"),
    ("cuda:-1", "(got 'cuda:-1')"), ("CPU", "(got 'CPU')"), ("sim:0", "sim:RATE must be a number from 0.01")])
def test_anything_else_is_one_line(text, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        Device.parse(text, ROWS)


def test_what_the_layers_below_ask():
    assert CPU.words() == "cpu" and CUDA.unindexed() == CUDA and Device.gpu(2).unindexed() == CUDA
    simulated = Device.parse("sim:300,launch=1,gbps=25,ahead=3,sync=0")
    assert simulated.words() == "simulated accelerator (300 samples/s)" and simulated.spec.launch_ms == 1


@given(st.text(max_size=40))
def test_any_text_is_a_device_or_one_line_of_value_error(text):
    for t in (text, "sim:" + text, "cuda:" + text):
        try:
            d = Device.parse(t, ROWS)
        except ValueError as exc:
            assert "\n" not in str(exc)
        else:
            assert Device.parse(str(d), ROWS) == d
