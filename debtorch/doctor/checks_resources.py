"""Checks: CPU, memory and limits, storage."""

from __future__ import annotations

from debtorch import knowledge
from debtorch.doctor import fixes
from debtorch.doctor.registry import check
from debtorch.findings import error, info, warning
from debtorch.doctor.limits import limit
from debtorch.units import human_bytes

MiB = 1024 * 1024
GiB = 1024 * MiB


def _gib_up(n: int) -> int:
    """Whole GiB for ``mount -o size=``, rounded up (never below what is asked)."""
    return max(1, -(-int(n) // GiB))


# ---------------------------------------------------------------- CPU
@check("cpu")
def check_governor(m, ctx):
    gov = m.get("cpu.governor")
    if gov is None or gov == "performance":
        return []
    return [warning("cpu.W001", f"CPU frequency governor is {gov}, not performance",
                    fix="sudo apt install linux-cpupower\nsudo cpupower frequency-set -g performance",
                    facts={"cpu.governor": gov, "cpu.governors": m.get("cpu.governors")})]


@check("cpu")
def check_threads(m, ctx):
    env = m.get("env.variables") or {}
    usable = m.cpus.usable if m.cpus.known else None
    omp = env.get("OMP_NUM_THREADS")
    if not usable or not omp:
        return []
    try:
        threads = int(omp)
    except ValueError:
        return [warning("cpu.W003", f"OMP_NUM_THREADS={omp!r} is not a number", fix="export OMP_NUM_THREADS=<integer>",
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
        return [warning("cpu.W002", f"OMP_NUM_THREADS={threads} x {procs} process(es) exceeds {usable} usable CPUs",
                        fix=f"export OMP_NUM_THREADS={per}   # usable CPUs // processes",
                        facts={"env.OMP_NUM_THREADS": threads, "processes": procs, "cpu.usable_cpus": usable})]
    return []


@check("cpu")
def check_wheel_arch(m, ctx):
    """PyTorch publishes Linux wheels for a few CPU architectures only (checks/torch_wheels.toml,
    [[machine]]); on any other, pip finds no torch at all."""
    row = m.wheels_for_arch
    if row is None or row:
        return []
    if m.torch.installed:
        return [info("cpu.I002", f"PyTorch publishes no wheels for {m.os.arch}; this torch was built elsewhere",
                     fix="Keep it: pip cannot replace it with an official build.",
                     facts={"os.arch": m.os.arch, "python.torch.version": m.torch.version})]
    return [warning("cpu.W004", f"PyTorch publishes no wheels for {m.os.arch}",
                    fix=f"Official wheels exist for {', '.join(knowledge.wheel_machines())} only: use a 64-bit "
                        "(arm64) OS where the CPU is 64-bit, Debian's own build (sudo apt install python3-torch, "
                        "CPU only) where Debian packages it for this architecture, or build PyTorch from source.",
                    facts={"os.arch": m.os.arch, "wheels_for": knowledge.wheel_machines()})]


@check("cpu")
def check_usable(m, ctx):
    usable, logical = (m.cpus.usable if m.cpus.known else None), m.cpus.logical
    if usable and logical and usable < logical:
        how = []
        if m.get("cpu.cgroup_quota_cpus") is not None:
            how.append(f"cgroup quota {m.get('cpu.cgroup_quota_cpus')} CPUs")
        if (m.get("cpu.affinity_cpus") or logical) < logical:
            how.append(f"affinity {m.get('cpu.affinity_cpus')} CPUs")
        return [info("cpu.I001", f"only {usable} of {logical} CPUs are usable here ({', '.join(how) or 'limits'})",
                     fix="Size DataLoader workers and threads by the usable CPUs (debtorch tune does).",
                     facts={"cpu.usable_cpus": usable, "cpu.logical_cpus": logical})]
    return []


# ---------------------------------------------------------------- memory
@check("memory")
def check_shm(m, ctx):
    shm = m.shm
    total, free, workers, needed = shm.total, shm.free, shm.workers, shm.needed
    if total is None:
        return []
    minimum = ctx.site.minimums.get("shm") if ctx.site else None
    facts_used = {"memory.shm_total": total, "memory.shm_free": free, "os.container": shm.container}
    if shm.docker_default:
        return [error("memory.E002", f"container runs with the default {human_bytes(total)} /dev/shm",
                      fix=fixes.SHM_DOCKER, facts=facts_used)]
    if shm.too_small:
        return [error("memory.E001", f"/dev/shm ({human_bytes(total)}) cannot hold one DataLoader worker's batches",
                      fix=fixes.shm_too_small(shm), facts=facts_used)]
    if free is not None and free < needed:
        return [warning("memory.W001", f"/dev/shm has {human_bytes(free)} free; {workers} workers may need {human_bytes(needed)}",
                        fix="Free /dev/shm (stale files of crashed runs) or enlarge it: "
                            f"sudo mount -o remount,size={_gib_up(total - free + needed)}G /dev/shm",
                        facts=facts_used)]
    if minimum and total < minimum:
        return [warning("site.W001", f"/dev/shm is {human_bytes(total)}, below the site minimum {human_bytes(minimum)}",
                        fix=f"sudo mount -o remount,size={_gib_up(minimum)}G /dev/shm",
                        facts=facts_used)]
    return []


@check("memory")
def check_nofile(m, ctx):
    soft = m.get("memory.nofile_soft")
    hard = m.get("memory.nofile_hard")
    floor = int(limit("nofile_min"))
    if soft is None or soft < 0 or soft >= floor:
        return []
    if hard is not None and (hard < 0 or hard >= floor):
        fix = f"ulimit -n {floor if hard >= 0 and hard < floor * 16 else floor * 16}   # in the shell that starts training (hard limit {hard if hard >= 0 else 'unlimited'})"
    else:
        fix = (f"Raise the hard limit: a line `*  hard  nofile  {floor * 16}` in /etc/security/limits.d/90-nofile.conf "
               "(or LimitNOFILE= in the systemd unit), log in again, then ulimit -n")
    return [warning("memory.W002", f"open-file limit {soft} is low for DataLoader workers",
                    fix=fix, facts={"memory.nofile_soft": soft, "memory.nofile_hard": hard})]


@check("memory")
def check_memlock(m, ctx):
    soft = m.get("memory.memlock_soft")
    if soft is None or soft < 0 or not m.gpus:
        return []
    floor = int(limit("memlock_min_bytes"))
    if soft >= floor:
        return []
    where = m.get("os.container") or ("WSL" if m.get("os.wsl") else None)
    fix = ("docker run --ulimit memlock=-1 ..." if m.get("os.container")
           else "a line `*  -  memlock  unlimited` in /etc/security/limits.d/90-memlock.conf, then log in again")
    make = warning if where else info
    fid = "memory.W003" if where else "memory.I001"
    return [make(fid, f"RLIMIT_MEMLOCK is {human_bytes(soft)}: pinned memory may be limited"
                 + (f" in this {where}" if where else ""),
                 fix=fix, facts={"memory.memlock_soft": soft, "os.container": m.get("os.container")})]


@check("memory")
def check_swap(m, ctx):
    used = m.get("memory.swap_used")
    total = m.get("memory.total")
    if not used or used < int(limit("swap_used_warn_bytes")):
        return []
    return [warning("memory.W004", f"{human_bytes(used)} of swap in use: training memory may be paged out",
                    fix="Close what uses the memory, or lower batch size / DataLoader workers; "
                        "check with: free -h; sudo swapoff -a && sudo swapon -a empties swap once RAM is free",
                    facts={"memory.swap_used": used, "memory.total": total})]


# ---------------------------------------------------------------- storage
@check("storage")
def check_data(m, ctx):
    d = m.get("storage.data")
    if not d:
        return []
    path = d.get("path")
    if not d.get("exists"):
        return [error("storage.E001", f"training data path {path} does not exist", about=path,
                      fix="Check the path given with --data.", facts={"storage.data.path": path})]
    out = []
    if d.get("network"):
        out.append(warning("storage.W002", f"training data is on a network filesystem ({d.get('fstype')})",
                           about=path,
                           fix="Copy the data set to a local NVMe disk before training, or cache it "
                               "(more DataLoader workers hide some latency).",
                           facts={"storage.data.fstype": d.get("fstype"), "storage.data.mount_point": d.get("mount_point")}))
    elif d.get("rotational"):
        out.append(warning("storage.W001", f"training data is on a rotational disk ({d.get('device')})",
                           about=path,
                           fix="Move the data to an SSD/NVMe disk, or load it into RAM (/dev/shm) if it fits. "
                               "(Virtual disks often report rotational=1: check `lsblk -d -o NAME,ROTA`.)",
                           facts={"storage.data.device": d.get("device"), "storage.data.rotational": True}))
    return out


@check("storage")
def check_nvme_link(m, ctx):
    out = []
    for c in m.get("storage.nvme") or []:
        cur, mx = c.get("current_gen"), c.get("max_gen")
        cw, mw = c.get("current_width"), c.get("max_width")
        if (cur and mx and cur < mx) or (cw and mw and cw < mw):
            out.append(warning("storage.W003",
                               f"NVMe {c.get('name')} link is gen{cur} x{cw}, below its maximum gen{mx} x{mw}",
                               about=f"{c.get('name')} ({c.get('model')})",
                               fix="Check the slot (lanes shared with other devices, a gen3 slot) and the BIOS "
                                   "PCIe settings: sudo lspci -vv | grep -A2 -i 'non-volatile' (LnkSta vs LnkCap).",
                               facts={"current": f"gen{cur} x{cw}", "max": f"gen{mx} x{mw}"}))
    return out
