"""tune's rules: facts in, settings with reasons out."""

import dataclasses

import pytest
from tune_facts import MiB, all_pairs, make_facts, server_8x_a100

from debtorch import facts as facts_mod
from debtorch.findings import catalogue
from debtorch.train.device import CPU, CUDA, Device
from debtorch.train.settings import Settings
from debtorch.tune import rules
from debtorch.tune.rules import Request, RequestError, recommend


def rule(rec, field):
    return rec.reasons[field].rule


def test_every_setting_has_a_reason_from_a_documented_rule():
    for doc in (make_facts(), server_8x_a100(), make_facts(cpus=16, gpus=[("Tesla V100", "7.0")])):
        rec = recommend(doc, Request(global_batch=512, micro_batch=32, steps=1000, model="conv"))
        assert set(rec.reasons) == {f.name for f in dataclasses.fields(Settings)}
        for reason in list(rec.reasons.values()) + list(rec.env_reasons.values()):
            assert reason.rule in catalogue() and reason.text and "\n" not in reason.text
        assert rec.settings.validate() == []


def test_recorded_2core_vm_gets_no_workers_never_2_to_4_x_cores(replay):
    doc = facts_mod.collect(replay("debian12-vm-2core"))
    rec = recommend(doc)
    assert rec.device == CPU
    assert rec.settings.num_workers == 0 and rule(rec, "num_workers") == "tune.R001"
    assert "2 usable CPUs (cpu.usable_cpus)" in rec.reasons["num_workers"].text
    assert rec.settings.threads == 2
    # This VM's Xeon has AMX and avx512_bf16: bf16 autocast on the CPU.
    assert rec.settings.precision == "bf16" and rule(rec, "precision") == "tune.R013"
    assert rec.settings.nproc == 1 and rec.settings.backend is None
    assert rec.settings.pin_memory is False


def test_cpu_with_avx512_bf16_trains_in_bf16_without_it_in_fp32():
    with_bf16 = recommend(make_facts(features={"avx512_bf16": True}))
    assert (with_bf16.settings.precision, rule(with_bf16, "precision")) == ("bf16", "tune.R013")
    amx_only = recommend(make_facts(features={"amx_bf16": True}))
    assert amx_only.settings.precision == "bf16" and "amx_bf16" in amx_only.reasons["precision"].text
    without = recommend(make_facts())
    assert (without.settings.precision, rule(without, "precision")) == ("fp32", "tune.R014")
    assert "no avx512_bf16 or amx_bf16" in without.reasons["precision"].text


def test_cpu_training_on_more_cores_splits_workers_and_threads():
    rec = recommend(make_facts(cpus=16))
    assert rule(rec, "num_workers") == "tune.R002"
    s = rec.settings
    assert s.num_workers == 4 and s.threads == 12
    assert s.nproc * (s.threads + s.num_workers) <= 16
    assert s.persistent_workers and s.prefetch_factor == 2 and s.start_method == "fork"


def test_8_gpu_server_one_process_per_gpu_nccl_and_workers_bounded_per_process():
    rec = recommend(server_8x_a100(cpus=128, p2p=all_pairs(8)))
    s = rec.settings
    assert rec.device == CUDA
    assert (s.nproc, s.backend) == (8, "nccl") and rule(rec, "nproc") == "tune.R020"
    assert "8 x NVIDIA A100-SXM4-80GB" in rec.reasons["nproc"].text
    assert s.num_workers == rules.MAX_WORKERS_PER_GPU and rule(rec, "num_workers") == "tune.R003"
    assert s.nproc * (s.threads + s.num_workers) <= 128
    assert (s.precision, s.tf32, s.cudnn_benchmark, s.pin_memory, s.non_blocking) == ("bf16", True, True, True, True)
    assert rec.env["OMP_NUM_THREADS"] == str(s.threads)
    assert "NCCL_P2P_DISABLE" not in rec.env  # every pair reports P2P OK
    assert "torchrun --standalone --nproc_per_node=8" in rec.emit_env()


def test_8_gpus_on_32_cpus_leave_one_cpu_per_process_to_drive_its_gpu():
    s = recommend(server_8x_a100(cpus=32)).settings
    assert (s.num_workers, s.threads) == (3, 1)
    assert s.nproc * (s.threads + s.num_workers) == 32


def test_p2p_unavailable_disables_nccl_p2p_and_says_which_pair():
    rec = recommend(server_8x_a100(p2p=all_pairs(8, bad={(2, 5)})))
    assert rec.env["NCCL_P2P_DISABLE"] == "1"
    reason = rec.env_reasons["NCCL_P2P_DISABLE"]
    assert reason.rule == "tune.R021" and "GPU 2<->5 peer-to-peer is chipset not supported" in reason.text
    assert "export NCCL_P2P_DISABLE=1" in rec.emit_env()
    # "unknown" is not a problem, and not knowledge either.
    unknown = recommend(server_8x_a100(p2p=all_pairs(8, bad={(0, 1)}, status="unknown")))
    assert "NCCL_P2P_DISABLE" not in unknown.env


def test_unknown_p2p_gives_a_note_not_a_guess():
    rec = recommend(server_8x_a100())
    assert "NCCL_P2P_DISABLE" not in rec.env
    assert any("peer-to-peer status unknown" in n for n in rec.notes)


def test_small_shm_container_limits_workers_with_a_reason():
    rec = recommend(make_facts(cpus=16, gpus=[("NVIDIA L4", "8.9")], shm_free=64 * MiB))
    assert rec.settings.num_workers == 0 and rule(rec, "num_workers") == "tune.R004"
    assert "/dev/shm has 64.0 MiB free (memory.shm_free)" in rec.reasons["num_workers"].text
    assert any("--shm-size" in n for n in rec.notes)
    assert rec.settings.prefetch_factor is None and not rec.settings.persistent_workers
    # A batch size known from the workload changes the bound.
    small = recommend(make_facts(cpus=16, gpus=[("NVIDIA L4", "8.9")], shm_free=64 * MiB),
                      Request(batch_bytes=4 * MiB))
    assert small.settings.num_workers == 4 and rule(small, "num_workers") == "tune.R004"


def test_low_open_file_limit_limits_workers():
    rec = recommend(make_facts(cpus=64, gpus=[("NVIDIA A10", "8.6")] * 4, nofile=1024))
    assert rec.settings.num_workers == 3 and rule(rec, "num_workers") == "tune.R005"
    assert "RLIMIT_NOFILE is 1024" in rec.reasons["num_workers"].text
    assert rec.max_workers == 3


@pytest.mark.parametrize("cc,precision,rule_id,tf32", [
    ("9.0", "bf16", "tune.R010", True),
    ("8.0", "bf16", "tune.R010", True),
    ("7.5", "fp16", "tune.R011", False),
    ("7.0", "fp16", "tune.R011", False),
    ("6.1", "fp32", "tune.R012", False),
    (None, "fp32", "tune.R012", False),
])
def test_gpu_precision_follows_compute_capability(cc, precision, rule_id, tf32):
    rec = recommend(make_facts(cpus=8, gpus=[("GPU", cc)]))
    assert (rec.settings.precision, rule(rec, "precision"), rec.settings.tf32) == (precision, rule_id, tf32)


def test_mixed_gpus_use_the_oldest_compute_capability():
    rec = recommend(make_facts(cpus=8, gpus=[("A100", "8.0"), ("V100", "7.0")]))
    assert rec.settings.precision == "fp16"


def test_cuda_visible_devices_limits_processes():
    doc = make_facts(cpus=32, gpus=[("A100", "8.0")] * 4, visible="1,3")
    rec = recommend(doc)
    assert rec.settings.nproc == 2
    assert recommend(make_facts(cpus=32, gpus=[("A100", "8.0")] * 4, visible="GPU-0002")).settings.nproc == 1
    # An empty CUDA_VISIBLE_DEVICES hides every GPU: CPU training.
    assert recommend(make_facts(cpus=32, gpus=[("A100", "8.0")] * 4, visible="")).device == CPU
    # CUDA stops at the first entry it cannot match.
    assert recommend(make_facts(cpus=32, gpus=[("A100", "8.0")] * 4, visible="0,7,1")).settings.nproc == 1


def test_gpus_with_a_cpu_only_torch_build_tune_for_the_cpu_and_say_why():
    rec = recommend(make_facts(cpus=8, gpus=[("RTX 4090", "8.9")], torch="2.13.0+cpu", torch_cuda=None))
    assert rec.device == CPU
    assert any("CPU-only PyTorch build" in n for n in rec.notes)


def test_asked_device_and_nproc_win():
    rec = recommend(make_facts(cpus=8), Request(device=CPU, nproc=2))
    assert (rec.settings.nproc, rec.settings.backend) == (2, "gloo")
    assert (rec.settings.num_workers, rec.settings.threads) == (1, 3)  # 4 CPUs per process
    with pytest.raises(ValueError, match=r"must be cpu, cuda, cuda:N or sim:RATE \(got 'tpu'\)"):
        Device.parse("tpu")   # a device is parsed where it is given: no request names one the rules cannot take


def test_cgroup_quota_below_affinity_is_named_in_the_threads_reason():
    rec = recommend(make_facts(cpus=2, affinity=16, quota=2.0))
    assert rec.settings.threads == 2
    assert "PyTorch would start 16 threads but the cgroup allows 2 CPUs" in rec.reasons["threads"].text


def test_unknown_usable_cpus_is_said_and_assumed_from_the_logical_count():
    doc = make_facts(cpus=4)
    doc["cpu"]["usable_cpus"] = None
    doc["cpu"]["unknown"] = {"usable_cpus": "affinity unreadable"}
    rec = recommend(doc)
    assert any(n.startswith("tune.R026") and "affinity unreadable" in n for n in rec.notes)
    assert "4 CPUs assumed" in rec.reasons["threads"].text


def test_gradient_accumulation_reaches_the_global_batch():
    rec = recommend(server_8x_a100(), Request(global_batch=1024, micro_batch=32))
    assert rec.settings.accumulation_steps == 4 and rec.global_batch == 1024
    assert rule(rec, "accumulation_steps") == "tune.R023"
    uneven = recommend(server_8x_a100(), Request(global_batch=1000, micro_batch=32))
    assert uneven.settings.accumulation_steps == 4 and uneven.global_batch == 1024
    assert any("not a multiple of 256" in n for n in uneven.notes)
    only_global = recommend(make_facts(), Request(global_batch=96))
    assert (only_global.settings.micro_batch, only_global.settings.accumulation_steps) == (96, 1)
    with pytest.raises(RequestError, match="smaller than one step"):
        recommend(server_8x_a100(), Request(global_batch=64, micro_batch=32))
    with pytest.raises(RequestError, match="--micro-batch must be an integer from 1 to"):
        recommend(make_facts(), Request(micro_batch=0))


def test_onecycle_only_with_a_run_length():
    assert recommend(make_facts()).settings.lr_schedule == "constant"
    rec = recommend(make_facts(), Request(steps=3000))
    assert (rec.settings.lr_schedule, rec.total_steps, rec.settings.pct_start) == ("onecycle", 3000, 0.3)
    rec = recommend(make_facts(), Request(epochs=5, steps_per_epoch=200))
    assert rec.total_steps == 1000 and rec.epochs == 5


def test_channels_last_for_conv_models_on_tensor_cores_only():
    conv = Request(model="conv")
    assert recommend(make_facts(cpus=8, gpus=[("A100", "8.0")]), conv).settings.channels_last is True
    assert recommend(make_facts(cpus=8, gpus=[("P100", "6.0")]), conv).settings.channels_last is False
    assert recommend(make_facts(cpus=8), conv).settings.channels_last is False
    assert recommend(make_facts(cpus=8, gpus=[("A100", "8.0")])).settings.channels_last is False


def test_fused_optimizer_needs_a_torch_that_has_it_and_compile_only_when_asked():
    assert recommend(make_facts(torch="2.3.1+cpu", torch_cuda=None)).settings.fused_optimizer is False
    assert recommend(make_facts(torch="2.4.0+cpu", torch_cuda=None)).settings.fused_optimizer is True
    assert recommend(make_facts()).settings.compile is False
    assert recommend(make_facts(), Request(compile=True)).settings.compile is True


def test_a_saved_facts_file_with_missing_sections_still_tunes():
    doc = {"schema_version": 1, "cpu": {"unknown": {"*": "not in the saved facts"}}}
    rec = recommend(doc)
    assert rec.device == CPU and rec.settings.validate() == []


@pytest.mark.parametrize("section,key,value", [
    ("cpu", "features", "avx2 avx512_bf16"),
    ("cpu", "cgroup_quota_cpus", "1.5"),
    ("nvidia", "gpus", 3),
    ("python", "torch", "2.13.0"),
])
def test_a_hand_edited_facts_value_of_the_wrong_type_tunes_instead_of_raising(section, key, value):
    from debtorch.fingerprint import from_facts
    from debtorch.tune.measure import precisions_for

    doc = make_facts(cpus=8, quota=2.0)
    doc[section][key] = value
    rec = recommend(doc)
    assert rec.settings.validate() == []
    assert precisions_for(rec, doc) and isinstance(from_facts(doc), dict)


def test_recorded_8xa100_nvlink_server(replay):
    doc = facts_mod.collect(replay("debian12-server-8xa100-nvlink"))
    rec = recommend(doc)
    s = rec.settings
    assert (rec.device, s.nproc, s.backend, s.precision, s.tf32) == (CUDA, 8, "nccl", "bf16", True)
    assert s.nproc * (s.threads + s.num_workers) <= doc["cpu"]["usable_cpus"]
    assert "NCCL_P2P_DISABLE" not in rec.env  # NVLink through NVSwitch, P2P ok for every pair
    assert not any("peer-to-peer status unknown" in n for n in rec.notes)


def test_recorded_t4_container_with_64m_shm(replay):
    doc = facts_mod.collect(replay("debian12-container-t4-shm64m"))
    rec = recommend(doc)
    assert (rec.device, rec.settings.precision) == (CUDA, "fp16")  # Tesla T4 is compute capability 7.5
    assert rec.reasons["precision"].rule == "tune.R011"
    assert rec.settings.num_workers == 0 and rule(rec, "num_workers") == "tune.R004"
    assert "/dev/shm has 64.0 MiB free" in rec.reasons["num_workers"].text


def test_recorded_gpu_with_a_broken_driver_tunes_for_the_cpu_and_says_so(replay):
    doc = facts_mod.collect(replay("debian12-driver-mismatch-rtx3090"))
    rec = recommend(doc)
    assert rec.device == CPU
    assert any("on the PCI bus but none usable" in n and "mismatch" in n for n in rec.notes)
