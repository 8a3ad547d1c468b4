"""Memory facts: RAM, swap, /dev/shm, RLIMIT_MEMLOCK, RLIMIT_NOFILE,
transparent hugepages, cgroup memory limit.  Sizes are bytes; -1 is unlimited."""

from __future__ import annotations

import re
from typing import Optional

from debtorch.facts import Context, Section
from debtorch.host import Host, Unavailable


def parse_meminfo(text: str) -> dict:
    """/proc/meminfo -> {key: bytes}.  Never raises."""
    out = {}
    for line in str(text).splitlines():
        m = re.match(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+(kB))?\s*$", line)
        if m:
            n = int(m.group(2))
            out[m.group(1)] = n * 1024 if m.group(3) else n
    return out


def parse_bracketed_choice(text: str) -> Optional[str]:
    """'always [madvise] never' -> 'madvise'.  Never raises."""
    m = re.search(r"\[([^\]]+)\]", str(text))
    return m.group(1) if m else None


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    try:
        mi = parse_meminfo(host.read_text("/proc/meminfo"))
    except Unavailable as exc:
        mi = {}
        for k in ("total", "available", "swap_total", "swap_used"):
            sec.unknown(k, f"/proc/meminfo: {exc.reason}")
    if mi:
        sec.set_or_unknown("total", mi.get("MemTotal"), "no MemTotal")
        sec.set_or_unknown("available", mi.get("MemAvailable"), "no MemAvailable")
        sec["swap_total"] = mi.get("SwapTotal")
        if mi.get("SwapTotal") is not None and mi.get("SwapFree") is not None:
            sec["swap_used"] = mi["SwapTotal"] - mi["SwapFree"]

    if host.is_dir("/dev/shm"):
        try:
            st = host.statvfs("/dev/shm")
            sec["shm_total"] = st["total"]
            sec["shm_free"] = st["free"]
        except Unavailable as exc:
            sec.unknown("shm_total", exc.reason)
    else:
        sec.unknown("shm_total", "/dev/shm is not mounted")

    for name, key in (("MEMLOCK", "memlock"), ("NOFILE", "nofile")):
        try:
            soft, hard = host.rlimit(name)
            sec[f"{key}_soft"] = soft
            sec[f"{key}_hard"] = hard
        except Unavailable as exc:
            sec.unknown(f"{key}_soft", exc.reason)

    thp = host.try_read("/sys/kernel/mm/transparent_hugepage/enabled")
    sec.set_or_unknown("transparent_hugepages", parse_bracketed_choice(thp) if thp else None,
                       "no /sys/kernel/mm/transparent_hugepage")

    # A container's memory limit (cgroup v2 memory.max, v1 limit_in_bytes).
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = host.try_read(path)
        if text is None:
            continue
        text = text.strip()
        if text.isdigit() and (not mi.get("MemTotal") or int(text) < mi["MemTotal"]):
            limit = int(text)
        break
    sec["cgroup_limit"] = limit
    return sec
