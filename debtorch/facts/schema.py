"""The types of a facts document, checked once where a document comes in (``--facts``,
fleet's documents) with :mod:`debtorch.schema`: a wrong-typed field is one line naming it,
never a crash later in a check or a view.  docs/facts.md describes the same fields.

``None`` is always allowed (an unknown), and so are fields the spec does not name
(documents from newer versions): the check is ``open``.
"""

from __future__ import annotations

from typing import Optional

from debtorch import schema as _schema

STR, INT, NUM, BOOL, ANY = _schema.text(), _schema.integer(), _schema.number(), _schema.BOOL, _schema.ANY
UNKNOWN = {"*": STR}

# One GPU (facts/nvidia.py's GPU_FIELDS, whose every field has its type here: a test checks it).
GPU = {
    "index": INT, "name": STR, "uuid": STR, "pci_bus_id": STR, "pci_address": STR, "compute_capability": STR,
    "memory_total": NUM, "memory_used": NUM, "memory_free": NUM, "pcie_current_gen": INT, "pcie_max_gen": INT,
    "pcie_current_width": INT, "pcie_max_width": INT, "persistence_mode": BOOL, "ecc_mode_current": BOOL,
    "ecc_mode_pending": BOOL, "ecc_uncorrected_volatile": INT, "ecc_uncorrected_aggregate": INT,
    "retired_pages_pending": BOOL, "retired_pages_single_bit": INT, "retired_pages_double_bit": INT,
    "remapped_rows_pending": BOOL, "remapped_rows_failure": BOOL, "remapped_rows_correctable": INT,
    "remapped_rows_uncorrectable": INT,
    "throttle_reasons": [STR], "temperature_c": NUM, "power_draw_w": NUM, "power_limit_w": NUM,
    "mig_mode_current": BOOL, "mig_mode_pending": BOOL, "compute_mode": STR, "pci_device_id": STR,
    "driver_model": STR, "virtualization_mode": STR, "vgpu_product": STR, "vgpu_license": STR, "mig_device_count": INT,
    "mig_devices": [{"index": INT, "gpu_instance_id": INT, "compute_instance_id": INT, "memory_total": NUM}],
    "processes": [{"pid": INT, "used_memory": NUM}], "utilization_gpu": NUM, "utilization_memory": NUM,
    "unknown": UNKNOWN,
}

# One pass of --measure-data's reads (facts/dataread.py).
READ_PASS = {"readers": INT, "files": INT, "bytes": NUM, "seconds": NUM, "failed": INT, "mb_per_s": NUM,
             "files_per_s": NUM}

SCHEMA: dict = {
    "os": {"id": STR, "id_like": STR, "pretty_name": STR, "version": STR, "version_id": STR, "codename": STR,
           "ubuntu_codename": STR, "debian_codename": STR, "debian_version": STR, "debian_version_full": STR, "platform": STR, "kernel": STR, "arch": STR,
           "hostname": STR, "user": STR, "wsl": INT, "glibc": STR, "container": STR,
           "container_evidence": [STR], "externally_managed": BOOL,
           "externally_managed_pythons": [STR], "system_python": STR, "release": STR, "unknown": UNKNOWN},
    "apt": {"source_files": [STR],
            "sources": [{"file": STR, "format": STR, "types": [STR], "uris": [STR],
                              "suites": [STR], "components": [STR], "enabled": BOOL, "options": ANY}],
            "suites": [STR], "cuda_repo": BOOL, "components": [STR], "backports": BOOL,
            "packages": {"*": {"version": STR, "arch": STR, "status": STR}},
            "running_kernel_headers": {"package": STR, "installed": BOOL, "build_dir": BOOL}, "unknown": UNKNOWN},
    "cpu": {"model": STR, "vendor": STR, "sockets": INT, "physical_cores": INT, "logical_cpus": INT,
            "affinity_cpus": INT, "cgroup_quota_cpus": NUM, "cgroup_quota_file": STR, "usable_cpus": INT,
            "numa_nodes": INT, "features": {"*": BOOL}, "governor": STR, "governors": [STR],
            "unknown": UNKNOWN},
    "memory": {"total": NUM, "available": NUM, "swap_total": NUM, "swap_used": NUM, "shm_total": NUM,
               "shm_free": NUM, "memlock_soft": NUM, "memlock_hard": NUM, "nofile_soft": NUM, "nofile_hard": NUM,
               "transparent_hugepages": STR, "cgroup_limit": NUM, "unknown": UNKNOWN},
    "storage": {"nvme": [{"name": STR, "model": STR, "firmware": STR, "current_gen": INT, "max_gen": INT,
                               "current_width": INT, "max_width": INT}],
                "data": {"path": STR, "exists": BOOL, "mount_point": STR, "fstype": STR, "network": BOOL,
                         "device": STR, "rotational": BOOL, "free_bytes": NUM, "total_bytes": NUM,
                         "read": {"path": STR, "files_found": INT, "mean_file_bytes": NUM, "cold": BOOL,
                                  "one": READ_PASS, "many": READ_PASS, "seconds": NUM, "data_rate": NUM,
                                  "samples_per_s": NUM, "need_mb_per_s": NUM, "best_mb_per_s": NUM,
                                  "best_files_per_s": NUM},
                         "unknown": UNKNOWN},
                "unknown": UNKNOWN},
    "nvidia": {"pci_devices": [{"address": STR, "device_id": STR, "name": STR, "driver": STR, "is_gpu": BOOL,
                                     "numa_node": INT}],
               "pci_gpu_count": INT, "kernel_module": {"version": STR, "flavor": STR, "line": STR, "gcc": STR},
               "modules": {"*": ANY}, "blacklisted": [{"module": STR, "how": STR, "file": STR}],
               "kernel_cmdline": {"*": ANY}, "secure_boot": BOOL, "module_files": [STR], "dkms_module": BOOL,
               "dkms_mok_key": {"path": STR, "exists": BOOL, "enrolled": BOOL},
               "userspace_driver_version": STR, "userspace_driver_version_from": STR,
               "nvml": {"available": BOOL, "error": STR, "error_kind": STR, "driver_version": STR,
                        "cuda_driver_version": STR, "nvml_version": STR, "source": STR, "unknown": UNKNOWN},
               "nvidia_smi": {"ran": BOOL, "returncode": INT, "error": STR, "error_kind": STR},
               "source": STR, "driver_version": STR, "cuda_driver_version": STR, "gpus": [GPU],
               "topology": [{"gpus": [INT], "link": STR, "nvlink_count": INT, "nvlink_via": STR,
                                  "pcie_level": STR, "p2p_read": STR, "p2p_nvlink": STR}],
               "unknown": UNKNOWN},
    "cuda": {"toolkit_nvcc": {"version": STR, "release": STR, "path": STR}, "cuda_home": {"*": STR},
             "linker_cache": [{"name": STR, "path": STR, "version": STR}],
             "wheel_libraries": [{"name": STR, "library": STR, "path": STR, "version": STR}],
             "ld_library_path_dirs": [{"dir": STR, "readable": BOOL, "reason": STR}],
             "ld_library_path": [{"name": STR, "path": STR, "real_path": STR, "dir": STR}],
             "shadowing": [{"name": STR, "ld_library_path_copy": STR}], "unknown": UNKNOWN},
    "python": {"executable": STR, "version": STR, "venv": BOOL, "prefix": STR, "distributions": {"*": ANY},
               "libraries": [STR],
               "torch": {"installed": BOOL, "version": STR, "cuda": STR, "hip": STR, "variant": STR,
                         "cpu_only": BOOL, "cudnn_wheel": STR, "nccl_wheel": STR, "cuda_runtime_wheel": STR,
                         "cudnn_conda": STR},
               "deep": {"ok": BOOL, "cuda_available": BOOL, "arch_list": [STR], "cudnn_version": INT,
                        "errors": {"*": STR}, "warnings": [STR], "mapped_libraries": [STR],
                        "exercise": {"*": {"*": STR}}},
               "unknown": UNKNOWN},
    "env": {"variables": {"*": STR}, "ld_library_path": [STR], "unknown": UNKNOWN},
    "network": {"interfaces": [{"name": STR, "operstate": STR, "flags": INT, "carrier": BOOL, "speed_mbps": NUM,
                                     "mtu": INT, "mac": STR, "link_type": STR, "virtual": BOOL,
                                     "addresses": [STR]}],
                "infiniband": [{"device": STR, "port": INT, "hca_type": STR, "fw_ver": STR, "state": STR,
                                     "phys_state": STR, "rate": STR, "rate_gbps": NUM, "link_layer": STR,
                                     "netdevs": [STR]}],
                "ofed_version": STR, "master_addr": {"name": STR, "addresses": [STR], "error": STR},
                "unknown": UNKNOWN},
}

def check(doc: dict) -> Optional[str]:
    """The first wrong-typed field of a facts document ("nvidia.gpus[0].index: must be an
    integer (got "zero")"), or None."""
    try:
        _schema.check(doc, SCHEMA, open=True)
    except _schema.Invalid as exc:
        return str(exc)
    return None
