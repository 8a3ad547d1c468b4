"""Checks: CPU, memory and limits, storage."""

from __future__ import annotations

import math

from debtorch import knowledge
from debtorch.doctor.fixes import host_side, no_wheels_advice
from debtorch.doctor.limits import limit
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine
from debtorch.units import human_bytes

MiB = 1024 * 1024
GiB = 1024 * MiB


def _gib_up(n: float) -> int:
    """Whole GiB for ``mount -o size=``, rounded up (never below what is asked)."""
    return max(1, -(-int(n) // GiB))


# ---------------------------------------------------------------- CPU
@check("cpu")
def check_governor(m: Machine, ctx: Context) -> list[Finding]:
    gov = m.get("cpu.governor")
    if gov is None or gov == "performance":
        return []
    return [finding("cpu.W001", variant=host_side(m), governor=gov,
                    facts={"cpu.governor": gov, "cpu.governors": m.get("cpu.governors")})]


@check("cpu")
def check_threads(m: Machine, ctx: Context) -> list[Finding]:
    env = m.get("env.variables") or {}
    usable = m.cpus.usable if m.cpus.known else None
    omp = env.get("OMP_NUM_THREADS")
    if not usable or not omp:
        return []
    try:
        threads = int(omp)
    except ValueError:
        return [finding("cpu.W003", value=repr(omp),
                        facts={"env.OMP_NUM_THREADS": omp})]
    procs = 1
    for var in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        if (env.get(var) or "").isdigit():
            procs = int(env[var])
            break
    else:
        procs = max(1, len(m.gpus))
    if threads * procs > usable:
        per = max(1, usable // procs)
        return [finding("cpu.W002", threads=threads, processes=procs, usable=usable, per=per,
                        facts={"env.OMP_NUM_THREADS": threads, "processes": procs, "cpu.usable_cpus": usable})]
    return []


@check("cpu")
def check_wheel_arch(m: Machine, ctx: Context) -> list[Finding]:
    """PyTorch publishes Linux wheels for a few CPU architectures only (checks/torch_wheels.toml,
    [[machine]]); on any other, pip finds no torch at all."""
    row = m.wheels_for_arch
    if row is None or row:
        return []
    if m.torch.installed:
        return [finding("cpu.I002", arch=m.os.arch,
                        facts={"os.arch": m.os.arch, "python.torch.version": m.torch.version})]
    return [finding("cpu.W004", arch=m.os.arch, fix=no_wheels_advice(m),
                    facts={"os.arch": m.os.arch, "wheels_for": knowledge.wheel_machines()})]


@check("cpu")
def check_usable(m: Machine, ctx: Context) -> list[Finding]:
    usable, logical = (m.cpus.usable if m.cpus.known else None), m.cpus.logical
    if usable and logical and usable < logical:
        how = []
        if m.get("cpu.cgroup_quota_cpus") is not None:
            how.append(f"cgroup quota {m.get('cpu.cgroup_quota_cpus')} CPUs")
        if (m.get("cpu.affinity_cpus") or logical) < logical:
            how.append(f"affinity {m.get('cpu.affinity_cpus')} CPUs")
        return [finding("cpu.I001", usable=usable, logical=logical, how=", ".join(how) or "limits",
                        facts={"cpu.usable_cpus": usable, "cpu.logical_cpus": logical})]
    return []


# ---------------------------------------------------------------- memory
@check("memory")
def check_shm(m: Machine, ctx: Context) -> list[Finding]:
    shm = m.shm
    total, free, workers, needed = shm.total, shm.free, shm.workers, shm.needed
    if total is None:
        return []
    minimum = ctx.site.minimums.get("shm") if ctx.site else None
    facts_used = {"memory.shm_total": total, "memory.shm_free": free, "os.container": shm.container}
    if shm.docker_default:
        return [finding("memory.E002", size=human_bytes(total), facts=facts_used)]
    if shm.too_small:
        return [finding("memory.E001", size=human_bytes(total), gib=shm.remount_gib, facts=facts_used)]
    if free is not None and free < needed:
        return [finding("memory.W001", free=human_bytes(free), workers=workers, needed=human_bytes(needed),
                        gib=_gib_up(total - free + needed), facts=facts_used)]
    if minimum and total < minimum:
        return [finding("site.W001", size=human_bytes(total), minimum=human_bytes(minimum), gib=_gib_up(minimum),
                        facts=facts_used)]
    return []


@check("memory")
def check_nofile(m: Machine, ctx: Context) -> list[Finding]:
    soft = m.get("memory.nofile_soft")
    hard = m.get("memory.nofile_hard")
    floor = int(limit("nofile_min"))
    if soft is None or soft < 0 or soft >= floor:
        return []
    if hard is not None and (hard < 0 or hard >= floor):
        variant, n = "", floor if 0 <= hard < floor * 16 else floor * 16
    else:
        variant, n = "hard", floor * 16
    return [finding("memory.W002", variant=variant, soft=soft, limit=n,
                    hard=hard if hard is None or hard >= 0 else "unlimited",
                    facts={"memory.nofile_soft": soft, "memory.nofile_hard": hard})]


@check("memory")
def check_memlock(m: Machine, ctx: Context) -> list[Finding]:
    soft = m.get("memory.memlock_soft")
    if soft is None or soft < 0 or not m.gpus:
        return []
    floor = int(limit("memlock_min_bytes"))
    if soft >= floor:
        return []
    container = m.get("os.container")
    where = container or ("WSL" if m.get("os.wsl") else None)
    fid = "memory.W003" if where else "memory.I001"
    variant = "container" if container else ""
    return [finding(fid, variant=variant, size=human_bytes(soft), where=where,
                    facts={"memory.memlock_soft": soft, "os.container": container})]


@check("memory")
def check_swap(m: Machine, ctx: Context) -> list[Finding]:
    used = m.get("memory.swap_used")
    total = m.get("memory.total")
    if not used or used < int(limit("swap_used_warn_bytes")):
        return []
    return [finding("memory.W004", used=human_bytes(used),
                    facts={"memory.swap_used": used, "memory.total": total})]


# ---------------------------------------------------------------- storage
@check("storage")
def check_data(m: Machine, ctx: Context) -> list[Finding]:
    d = m.get("storage.data")
    if not d:
        return []
    path = d.get("path")
    if not d.get("exists"):
        return [finding("storage.E001", path=path, about=path, facts={"storage.data.path": path})]
    out = []
    if d.get("network"):
        out.append(finding("storage.W002", fstype=d.get("fstype"), about=path,
                           facts={"storage.data.fstype": d.get("fstype"), "storage.data.mount_point": d.get("mount_point")}))
    elif d.get("rotational"):
        out.append(finding("storage.W001", device=d.get("device"), about=path,
                           facts={"storage.data.device": d.get("device"), "storage.data.rotational": True}))
    return out


@check("storage")
def check_data_read(m: Machine, ctx: Context) -> list[Finding]:
    """What ``--measure-data`` read, against the samples per second the loader needs (``--data-rate``)."""
    d = m.get("storage.data") or {}
    r = d.get("read")
    if not r:
        return []
    one, many, path = r.get("one") or {}, r.get("many") or {}, d.get("path") or r.get("path")
    readers = many.get("readers") or 1
    facts = {"storage.data.fstype": d.get("fstype"), "storage.data.network": d.get("network"),
             "storage.data.rotational": d.get("rotational"), "storage.data.device": d.get("device"),
             "storage.data.read.cold": r.get("cold"), "storage.data.read.files_found": r.get("files_found")}
    rate, cap = r.get("data_rate"), r.get("samples_per_s") or 0.0
    judged = "give --data-rate SAMPLES_PER_S to judge them against the loader's need"
    if rate:
        judged = f"they feed {cap:.0f} samples/s (one file a sample); the loader needs {rate:.0f}"
    out = [finding("storage.I002", about=path, facts=facts, mb1=f"{one.get('mb_per_s', 0):.1f}",
                   fps1=f"{one.get('files_per_s', 0):.0f}", mbn=f"{many.get('mb_per_s', 0):.1f}",
                   fpsn=f"{many.get('files_per_s', 0):.0f}", readers=readers, judged=judged)]
    if not rate:
        return out
    if cap < rate:
        values = {"cap": f"{cap:.0f}", "need": f"{rate:.0f}", "readers": readers, "path": path,
                  "mbs": f"{r.get('best_mb_per_s', 0):.1f}", "fps": f"{r.get('best_files_per_s', 0):.0f}",
                  "need_mbs": f"{r.get('need_mb_per_s') or 0:.1f}", "fstype": d.get("fstype"),
                  "device": d.get("device")}
        variant = ""
        if d.get("network"):
            variant = "network"
        elif d.get("rotational"):
            variant = "rotational"
        out.append(finding("storage.W004", about=path, facts=facts, variant=variant, **values))
        return out
    single = _samples_per_s(r, one)
    if single < rate:
        per_reader = max(1e-9, cap / readers)
        out.append(finding("storage.I001", about=path, facts=facts, one=f"{single:.0f}", many=f"{cap:.0f}",
                           readers=readers, need=f"{rate:.0f}", workers=min(readers, math.ceil(rate / per_reader))))
    return out


def _samples_per_s(read: dict, one_pass: dict) -> float:
    """Samples/s one pass's reads feed a loader (one file a sample)."""
    mean = read.get("mean_file_bytes") or 0
    by_bytes = (one_pass.get("mb_per_s") or 0) * 1e6 / mean if mean else float("inf")
    return min(one_pass.get("files_per_s") or 0.0, by_bytes)


@check("storage")
def check_nvme_link(m: Machine, ctx: Context) -> list[Finding]:
    out = []
    for c in m.get("storage.nvme") or []:
        cur, mx = c.get("current_gen"), c.get("max_gen")
        cw, mw = c.get("current_width"), c.get("max_width")
        if (cur and mx and cur < mx) or (cw and mw and cw < mw):
            out.append(finding("storage.W003", name=c.get("name"), gen=cur, width=cw, max_gen=mx, max_width=mw,
                               about=f"{c.get('name')} ({c.get('model')})",
                               facts={"current": f"gen{cur} x{cw}", "max": f"gen{mx} x{mw}"}))
    return out
