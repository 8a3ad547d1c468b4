"""The fingerprint: what the config remembers of the machine, and what counts as a difference."""

from tune_facts import make_facts, server_8x_a100

from debtorch.fingerprint import differences, from_facts


def test_fingerprint_names_gpus_driver_torch_and_cpus_and_no_hostname():
    fp = from_facts(server_8x_a100(cpus=96, visible="0,1"))
    assert fp["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 2  # what CUDA_VISIBLE_DEVICES leaves
    assert fp["driver"] == "580.65.06" and fp["torch"] == "2.13.0+cu130" and fp["torch_cuda"] == "13.0"
    assert fp["usable_cpus"] == 96 and fp["cpu_bf16"] == []
    assert not any("host" in k for k in fp)


def test_no_nvidia_device_is_an_empty_gpu_list_and_a_cpu_build_an_empty_cuda():
    doc = make_facts(torch="2.13.0+cpu", torch_cuda=None)
    doc["nvidia"] = {"pci_devices": []}
    fp = from_facts(doc)
    assert fp["gpus"] == [] and fp["torch_cuda"] == "" and "driver" not in fp


def test_differences_name_what_changed_and_ignore_unknowns():
    a = from_facts(server_8x_a100())
    b = from_facts(make_facts(cpus=2, features={"amx_bf16": True}, torch="2.13.0+cpu", torch_cuda=None))
    diffs = differences(a, b)
    assert "usable_cpus 128 -> 2" in diffs
    assert "gpus [" + ", ".join(["NVIDIA A100-SXM4-80GB"] * 8) + "] -> none" in diffs
    assert "torch_cuda 13.0 -> none" in diffs and "cpu_bf16 none -> [amx_bf16]" in diffs
    assert differences(a, a) == []
    b.pop("usable_cpus")
    assert not any(d.startswith("usable_cpus") for d in differences(a, b))
