"""CPU facts: model, vendor, sockets, cores, usable CPUs (affinity and cgroup
quota), NUMA nodes, training-relevant features, scaling governor."""

from __future__ import annotations

import math
import re
from typing import Optional

from debtorch.facts import Context, Section
from debtorch.host import Host, Unavailable

# Features that decide precision and kernels on the CPU.
FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_fp16", "fma",
            "asimd", "sve", "bf16")

# "CPU implementer" (MIDR_EL1.Implementer, Arm Architecture Reference Manual) -> vendor, as
# util-linux's lscpu names them (sys-utils/lscpu-arm.c, hw_implementer; read at 39465c78).
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x44": "DEC", "0x46": "Fujitsu",
                    "0x48": "HiSilicon", "0x49": "Infineon", "0x4d": "Motorola/Freescale", "0x4e": "NVIDIA",
                    "0x50": "APM", "0x51": "Qualcomm", "0x53": "Samsung", "0x56": "Marvell", "0x61": "Apple",
                    "0x66": "Faraday", "0x69": "Intel", "0x6d": "Microsoft", "0x70": "Phytium", "0xc0": "Ampere"}


_S390_PROCESSOR = re.compile(r"processor \d+")


def arm_simd(flags: set) -> set:
    """32-bit Arm kernels name Advanced SIMD "neon" where arm64 ones say "asimd" (Linux's hwcap
    strings: arch/arm/kernel/setup.c, arch/arm64/kernel/cpuinfo.c): one feature, one name."""
    return flags | {"asimd"} if "neon" in flags else flags


def parse_cpuinfo(text: str) -> dict:
    """Parse /proc/cpuinfo (x86, Arm, POWER, s390x, SPARC, MIPS).  Never raises.

    Returns model, vendor, logical (count of processors), sockets,
    physical_cores (None when the text cannot tell) and flags (a set of words).

    Layouts: x86 and Arm64 give a block per ``processor : N``; 32-bit Arm kernels
    and old Arm64 ones add ``Processor : AArch64 Processor rev 4 (aarch64)`` (the
    model, not a processor number); POWER names the CPU in each block's ``cpu``
    line and the machine in ``model``; s390x has one ``processor N: ...`` line per
    CPU and ``# processors``; SPARC has ``cpu`` and ``ncpus active``.
    """
    blocks: list[dict] = []
    cur: dict = {}
    tail: dict = {}
    s390 = 0
    for line in str(text).splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if _S390_PROCESSOR.fullmatch(key):
            s390 += 1
            continue
        if key == "processor" and not value.isdigit():
            cur.setdefault("processor model", value)     # "Processor : ARMv7 Processor rev 4 (v7l)"
            continue
        if key == "processor" and cur and "processor" in cur:
            blocks.append(cur)
            cur = {}
        cur[key] = value
    if cur:
        blocks.append(cur)
    procs = [b for b in blocks if "processor" in b and b["processor"].strip().isdigit()]
    for b in blocks:
        if b not in procs:
            tail.update(b)
    first: dict = {}
    if procs:
        first = procs[0]
    elif blocks:
        first = blocks[0]
    # Old Arm kernels print the CPU's description once, after the list of processors
    # ("Features", "CPU implementer", "CPU part"), in the tail or run on from the last
    # processor's lines, not in each processor's block.
    shared = {k: b[k] for b in reversed(procs + [tail]) for k in ("features", "cpu implementer", "cpu part")
              if k in b and k not in first}
    first = {**shared, **first}
    flags: set = set()
    for b in procs or blocks:
        flags |= set((b.get("flags") or b.get("features") or "").split())
    if not flags:
        flags = set((first.get("flags") or first.get("features") or "").split())
    flags = arm_simd(flags)
    model = (first.get("model name") or first.get("processor model") or tail.get("processor model")
             or first.get("cpu") or tail.get("cpu") or first.get("cpu model") or tail.get("cpu model")
             or tail.get("model") or tail.get("hardware"))
    vendor = first.get("vendor_id")
    if vendor is None and first.get("cpu implementer"):
        vendor = ARM_IMPLEMENTERS.get(first["cpu implementer"].lower(), first["cpu implementer"])
    if model is None and first.get("cpu part"):
        model = f"{vendor or 'Arm'} CPU part {first['cpu part']}"
    sockets_ids = {b.get("physical id") for b in procs if b.get("physical id") is not None}
    cores = {(b.get("physical id"), b.get("core id")) for b in procs if b.get("core id") is not None}
    logical = len(procs)
    if not logical:
        # s390x: one "processor N:" line per CPU and "# processors"; SPARC: "ncpus active".
        counted = [s390, _leading_int(tail.get("# processors")), _leading_int(tail.get("ncpus active"))]
        logical = next((n for n in counted if n), 0)
    physical: Optional[int] = None
    if cores:
        physical = len(cores)
    elif logical and "ht" not in flags and vendor not in ("GenuineIntel", "AuthenticAMD"):
        physical = logical  # Arm cores have no SMT siblings in cpuinfo
    return {
        "model": model,
        "vendor": vendor,
        "logical": logical or None,
        "sockets": len(sockets_ids) or (1 if logical else None),
        "physical_cores": physical,
        "flags": flags,
    }


def _leading_int(text: Optional[str]) -> int:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else 0


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11].  Never raises; bad parts are skipped."""
    cpus: set = set()
    for part in str(text).strip().split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            continue
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi >= lo and hi - lo < 65536:
            cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def parse_cgroup_v2_cpu_max(text: str) -> Optional[float]:
    """'200000 100000' -> 2.0 CPUs; 'max 100000' -> None (no quota).  Never raises."""
    words = str(text).split()
    if len(words) < 1 or words[0] == "max":
        return None
    try:
        quota = int(words[0])
        period = int(words[1]) if len(words) > 1 else 100000
    except ValueError:
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def _cgroup_quota(host: Host) -> tuple[Optional[float], str]:
    """CPUs allowed by the cgroup quota, and where that was read."""
    own = host.try_read("/proc/self/cgroup") or ""
    v2_path = "/"
    v1_path = "/"
    for line in own.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2] or "/"
        if "cpu" in parts[1].split(","):
            v1_path = parts[2] or "/"
    # cgroup v2: walk from our cgroup up to the root; the tightest quota wins.
    best: Optional[float] = None
    where = ""
    path = v2_path.rstrip("/")
    while True:
        text = host.try_read(f"/sys/fs/cgroup{path}/cpu.max")
        if text is not None:
            q = parse_cgroup_v2_cpu_max(text)
            if q is not None and (best is None or q < best):
                best, where = q, f"/sys/fs/cgroup{path}/cpu.max"
        if not path:
            break
        path = path.rsplit("/", 1)[0]
    if best is not None:
        return best, where
    for base in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
        for sub in (v1_path.rstrip("/"), ""):
            q_text = host.try_read(f"{base}{sub}/cpu.cfs_quota_us")
            p_text = host.try_read(f"{base}{sub}/cpu.cfs_period_us")
            if q_text is None or p_text is None:
                continue
            try:
                quota, period = int(q_text), int(p_text)
            except ValueError:
                continue
            if quota > 0 and period > 0:
                return quota / period, f"{base}{sub}/cpu.cfs_quota_us"
            return None, ""
    return None, ""


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    try:
        info = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    except Unavailable as exc:
        info = {"model": None, "vendor": None, "logical": None, "sockets": None, "physical_cores": None, "flags": set()}
        sec.unknown("model", f"/proc/cpuinfo: {exc.reason}")
    sec.setdefault("model", info["model"])
    sec["vendor"] = info["vendor"]
    sec["sockets"] = info["sockets"]
    sec.set_or_unknown("physical_cores", info["physical_cores"], "cpuinfo has no core ids")
    sec.set_or_unknown("logical_cpus", info["logical"], "no processors in /proc/cpuinfo")
    flags = info["flags"]
    sec["features"] = {f: (f in flags) for f in FEATURES if flags}
    if not flags:
        sec.unknown("features", "no flags in /proc/cpuinfo")

    try:
        affinity = host.affinity()
        sec["affinity_cpus"] = len(affinity)
    except Unavailable as exc:
        affinity = None
        sec.unknown("affinity_cpus", exc.reason)
    quota, where = _cgroup_quota(host)
    sec["cgroup_quota_cpus"] = round(quota, 2) if quota is not None else None
    sec["cgroup_quota_file"] = where or None
    candidates = [x for x in (sec.get("affinity_cpus"), sec.get("logical_cpus")) if x]
    if quota is not None:
        candidates.append(max(1, math.floor(quota)))
    if candidates:
        sec["usable_cpus"] = min(candidates)
    else:
        sec.unknown("usable_cpus", "neither affinity nor cpuinfo could be read")

    online = host.try_read("/sys/devices/system/node/online")
    if online is not None:
        sec["numa_nodes"] = len(parse_cpu_list(online)) or 1
    else:
        sec.unknown("numa_nodes", "no /sys/devices/system/node")

    governors = set()
    for name in host.try_listdir("/sys/devices/system/cpu/cpufreq"):
        if name.startswith("policy"):
            g = host.try_read(f"/sys/devices/system/cpu/cpufreq/{name}/scaling_governor")
            if g and g.strip():
                governors.add(g.strip())
    if governors:
        sec["governors"] = sorted(governors)
        sec["governor"] = sorted(governors)[0] if len(governors) == 1 else "mixed"
    else:
        sec.unknown("governor", "no cpufreq scaling (a VM, or the driver is not loaded)")
    return sec
