"""Small facts documents for tune's tests: only the fields the rules read."""

GiB = 1024 ** 3
MiB = 1024 ** 2


def make_facts(cpus=2, features=None, gpus=(), shm_free=16 * GiB, nofile=65536, memlock=-1,
               torch="2.13.0+cu130", torch_cuda="13.0", p2p=None, visible=None, quota=None, affinity=None,
               model="Test CPU"):
    """A facts dict.  ``gpus`` is a list of (name, compute capability) pairs."""
    feats = {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False}
    feats.update(features or {})
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    doc = {
        "schema_version": 1,
        "os": {"arch": "x86_64"},
        "cpu": {"model": model, "logical_cpus": affinity or cpus, "affinity_cpus": affinity or cpus,
                "cgroup_quota_cpus": quota, "usable_cpus": cpus, "features": feats},
        "memory": {"shm_total": shm_free, "shm_free": shm_free, "nofile_soft": nofile, "memlock_soft": memlock},
        "nvidia": {"pci_devices": [{"address": f"0000:{i:02x}:00.0"} for i in range(len(gpus))],
                   "gpus": [{"index": i, "name": n, "uuid": f"GPU-{i:04d}-test", "compute_capability": cc,
                             "memory_total": 80 * GiB} for i, (n, cc) in enumerate(gpus)]},
        "python": {"version": "3.11.2",
                   "torch": {"installed": True, "version": torch, "cuda": torch_cuda,
                             "cpu_only": torch_cuda is None}},
        "env": {"variables": env},
    }
    if gpus:
        doc["nvidia"]["driver_version"] = "580.65.06"
    if p2p is not None:
        doc["nvidia"]["topology"] = p2p
    return doc


def server_8x_a100(cpus=128, **kw):
    return make_facts(cpus=cpus, gpus=[("NVIDIA A100-SXM4-80GB", "8.0")] * 8, **kw)


def all_pairs(n, bad=(), status="chipset not supported"):
    """``nvidia.topology`` for n GPUs as the nvidia facts give it; pairs in ``bad`` get ``status``."""
    rows = []
    for a in range(n):
        for b in range(a + 1, n):
            rows.append({"gpus": [a, b], "link": "pcie", "p2p_read": status if (a, b) in bad else "ok"})
    return rows
