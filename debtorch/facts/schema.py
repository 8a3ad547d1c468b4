"""The types of a facts document, checked once where a document comes in (``--facts``,
fleet's documents): a wrong-typed field is one line naming it, never a crash later
in a check or a view.  docs/facts.md describes the same fields.

A spec is a type name (``str``, ``int``, ``num``, ``bool``), a container
(``["list", item]``, ``{"*": value}`` for a mapping with any keys, or a dict of
fields), or ``any``.  ``None`` is always allowed (an unknown); fields the spec
does not name are allowed (documents from newer versions).
"""

from __future__ import annotations

from typing import Any, Optional

from debtorch.inputs import finite

STR, INT, NUM, BOOL, ANY = "str", "int", "num", "bool", "any"
UNKNOWN = {"*": STR}


def _list(item: Any) -> list:
    return ["list", item]


GPU = {
    "index": INT, "name": STR, "uuid": STR, "pci_bus_id": STR, "pci_address": STR, "compute_capability": STR,
    "memory_total": NUM, "memory_used": NUM, "memory_free": NUM, "pcie_current_gen": INT, "pcie_max_gen": INT,
    "pcie_current_width": INT, "pcie_max_width": INT, "persistence_mode": BOOL, "ecc_mode_current": BOOL,
    "ecc_mode_pending": BOOL, "ecc_uncorrected_volatile": INT, "ecc_uncorrected_aggregate": INT,
    "retired_pages_pending": BOOL, "remapped_rows_pending": BOOL, "remapped_rows_failure": BOOL,
    "throttle_reasons": _list(STR), "temperature_c": NUM, "power_draw_w": NUM, "power_limit_w": NUM,
    "mig_mode_current": BOOL, "mig_mode_pending": BOOL, "compute_mode": STR, "pci_device_id": STR,
    "driver_model": STR, "virtualization_mode": STR, "mig_device_count": INT,
    "mig_devices": _list({"index": INT, "gpu_instance_id": INT, "compute_instance_id": INT, "memory_total": NUM}),
    "processes": _list({"pid": INT, "used_memory": NUM}), "utilization_gpu": NUM, "utilization_memory": NUM,
    "unknown": UNKNOWN,
}

SCHEMA: dict = {
    "os": {"id": STR, "id_like": STR, "pretty_name": STR, "version": STR, "version_id": STR, "codename": STR,
           "ubuntu_codename": STR, "debian_codename": STR, "debian_version": STR, "debian_version_full": STR, "platform": STR, "kernel": STR, "arch": STR,
           "hostname": STR, "user": STR, "wsl": INT, "glibc": STR, "container": STR,
           "container_evidence": _list(STR), "externally_managed": BOOL,
           "externally_managed_pythons": _list(STR), "system_python": STR, "release": STR, "unknown": UNKNOWN},
    "apt": {"source_files": _list(STR),
            "sources": _list({"file": STR, "format": STR, "types": _list(STR), "uris": _list(STR),
                              "suites": _list(STR), "components": _list(STR), "enabled": BOOL, "options": ANY}),
            "suites": _list(STR), "cuda_repo": BOOL, "components": _list(STR), "backports": BOOL,
            "packages": {"*": {"version": STR, "arch": STR, "status": STR}},
            "running_kernel_headers": {"package": STR, "installed": BOOL, "build_dir": BOOL}, "unknown": UNKNOWN},
    "cpu": {"model": STR, "vendor": STR, "sockets": INT, "physical_cores": INT, "logical_cpus": INT,
            "affinity_cpus": INT, "cgroup_quota_cpus": NUM, "cgroup_quota_file": STR, "usable_cpus": INT,
            "numa_nodes": INT, "features": {"*": BOOL}, "governor": STR, "governors": _list(STR),
            "unknown": UNKNOWN},
    "memory": {"total": NUM, "available": NUM, "swap_total": NUM, "swap_used": NUM, "shm_total": NUM,
               "shm_free": NUM, "memlock_soft": NUM, "memlock_hard": NUM, "nofile_soft": NUM, "nofile_hard": NUM,
               "transparent_hugepages": STR, "cgroup_limit": NUM, "unknown": UNKNOWN},
    "storage": {"nvme": _list({"name": STR, "model": STR, "firmware": STR, "current_gen": INT, "max_gen": INT,
                               "current_width": INT, "max_width": INT}),
                "data": {"path": STR, "exists": BOOL, "mount_point": STR, "fstype": STR, "network": BOOL,
                         "device": STR, "rotational": BOOL, "free_bytes": NUM, "total_bytes": NUM},
                "unknown": UNKNOWN},
    "nvidia": {"pci_devices": _list({"address": STR, "device_id": STR, "name": STR, "driver": STR, "is_gpu": BOOL,
                                     "numa_node": INT}),
               "pci_gpu_count": INT, "kernel_module": {"version": STR, "flavor": STR, "line": STR, "gcc": STR},
               "modules": {"*": ANY}, "blacklisted": _list({"module": STR, "how": STR, "file": STR}),
               "kernel_cmdline": {"*": ANY}, "secure_boot": BOOL, "module_files": _list(STR), "dkms_module": BOOL,
               "dkms_mok_key": {"path": STR, "exists": BOOL, "enrolled": BOOL},
               "userspace_driver_version": STR, "userspace_driver_version_from": STR,
               "nvml": {"available": BOOL, "error": STR, "error_kind": STR, "driver_version": STR,
                        "cuda_driver_version": STR, "nvml_version": STR, "source": STR, "unknown": UNKNOWN},
               "nvidia_smi": {"ran": BOOL, "returncode": INT, "error": STR, "error_kind": STR},
               "source": STR, "driver_version": STR, "cuda_driver_version": STR, "gpus": _list(GPU),
               "topology": _list({"gpus": _list(INT), "link": STR, "nvlink_count": INT, "nvlink_via": STR,
                                  "pcie_level": STR, "p2p_read": STR, "p2p_nvlink": STR}),
               "unknown": UNKNOWN},
    "cuda": {"toolkit_nvcc": {"version": STR, "release": STR, "path": STR}, "cuda_home": {"*": STR},
             "linker_cache": _list({"name": STR, "path": STR, "version": STR}),
             "wheel_libraries": _list({"name": STR, "library": STR, "path": STR, "version": STR}),
             "ld_library_path_dirs": _list({"dir": STR, "readable": BOOL, "reason": STR}),
             "ld_library_path": _list({"name": STR, "path": STR, "real_path": STR, "dir": STR}),
             "shadowing": _list({"name": STR, "ld_library_path_copy": STR}), "unknown": UNKNOWN},
    "python": {"executable": STR, "version": STR, "venv": BOOL, "prefix": STR, "distributions": {"*": ANY},
               "libraries": _list(STR),
               "torch": {"installed": BOOL, "version": STR, "cuda": STR, "hip": STR, "variant": STR,
                         "cpu_only": BOOL, "cudnn_wheel": STR, "nccl_wheel": STR, "cuda_runtime_wheel": STR,
                         "cudnn_conda": STR},
               "deep": {"ok": BOOL, "cuda_available": BOOL, "arch_list": _list(STR), "cudnn_version": INT,
                        "errors": {"*": STR}, "warnings": _list(STR), "mapped_libraries": _list(STR),
                        "exercise": {"*": {"*": STR}}},
               "unknown": UNKNOWN},
    "env": {"variables": {"*": STR}, "ld_library_path": _list(STR), "unknown": UNKNOWN},
    "network": {"interfaces": _list({"name": STR, "operstate": STR, "flags": INT, "carrier": BOOL, "speed_mbps": NUM,
                                     "mtu": INT, "mac": STR, "link_type": STR, "virtual": BOOL,
                                     "addresses": _list(STR)}),
                "infiniband": _list({"device": STR, "port": INT, "hca_type": STR, "fw_ver": STR, "state": STR,
                                     "phys_state": STR, "rate": STR, "rate_gbps": NUM, "link_layer": STR,
                                     "netdevs": _list(STR)}),
                "ofed_version": STR, "master_addr": {"name": STR, "addresses": _list(STR), "error": STR},
                "unknown": UNKNOWN},
}

_KINDS = {
    STR: (lambda v: isinstance(v, str), "a string"),
    INT: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    NUM: (finite, "a finite number"),
    BOOL: (lambda v: isinstance(v, bool), "true or false"),
}


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def problem(value: Any, spec: Any, where: str) -> Optional[str]:
    """The first way ``value`` breaks ``spec``, as "where: expected ..., got ...", or None."""
    if value is None or spec == ANY:
        return None
    if isinstance(spec, str):
        ok, name = _KINDS[spec]
        return None if ok(value) else f"{where}: expected {name}, got {_what(value)}"
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where}: expected a list, got {_what(value)}"
        for i, item in enumerate(value):
            bad = problem(item, spec[1], f"{where}[{i}]")
            if bad:
                return bad
        return None
    if not isinstance(value, dict):
        return f"{where}: expected an object, got {_what(value)}"
    if "*" in spec:
        for key, item in value.items():
            bad = problem(item, spec["*"], f"{where}.{key}")
            if bad:
                return bad
        return None
    for key, sub in spec.items():
        bad = problem(value.get(key), sub, f"{where}.{key}" if where else key)
        if bad:
            return bad
    return None


def check(doc: dict) -> Optional[str]:
    """The first wrong-typed field of a facts document, or None."""
    for section, spec in SCHEMA.items():
        bad = problem(doc.get(section), spec, section)
        if bad:
            return bad
    return None
