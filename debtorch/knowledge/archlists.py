"""GPU architecture lists (TORCH_CUDA_ARCH_LIST text, torch.cuda.get_arch_list()) and whether a
build for one has code for a GPU: pure functions, no table (the SASS/PTX rule of docs/knowledge.md)."""

from __future__ import annotations

import re
from typing import Any, List, Tuple

from debtorch import versions


def parse_arch_list(arch_list: Any, strict: bool = False) -> Tuple[frozenset, frozenset]:
    """SASS and PTX targets of TORCH_CUDA_ARCH_LIST text or torch.cuda.get_arch_list()'s list: sets of
    ``(major, minor, suffix)``, suffix "", "a" (arch-specific) or "f" (family-specific).  Unreadable
    entries are skipped, or raise ValueError when ``strict``."""
    if isinstance(arch_list, (list, tuple, set, frozenset)):
        items = [str(x) for x in arch_list]
    elif isinstance(arch_list, str):
        items = re.split(r"[;,\s\[\]'\"]+", arch_list)
    else:
        if strict:
            raise ValueError("must be a string or a list")
        return frozenset(), frozenset()
    sass: set = set()
    ptx: set = set()
    for item in items:
        text = item.strip().lower()
        if not text:
            continue
        m = re.fullmatch(r"(\d{1,2})\.(\d)([af]?)(\+ptx)?", text) or re.fullmatch(r"(sm|compute)_(\d{1,2})(\d)([af]?)", text)
        if not m:
            if strict:
                raise ValueError(f"cannot read architecture {item!r}")
            continue
        if m.group(1) in ("sm", "compute"):
            target = (int(m.group(2)), int(m.group(3)), m.group(4))
            (sass if m.group(1) == "sm" else ptx).add(target)
        else:
            target = (int(m.group(1)), int(m.group(2)), m.group(3))
            sass.add(target)
            if m.group(4):
                ptx.add(target)
    return frozenset(sass), frozenset(ptx)


def sass_list(arch_list: Any) -> List[str]:
    """The compute capabilities an arch list has SASS for, as "8.6", oldest first."""
    sass, _ptx = parse_arch_list(arch_list or "")
    return [f"{t[0]}.{t[1]}" for t in sorted(sass)]


def _arch_name(t: Tuple[int, int, str], kind: str) -> str:
    return f"{kind}_{t[0]}{t[1]}{t[2]}"


def older_than_all(compute_capability: Any, arch_list: Any) -> bool:
    """True when the GPU is older than every architecture in the list."""
    cc = versions.parse_cc(compute_capability)
    sass, ptx = parse_arch_list(arch_list)
    targets = sass | ptx
    return bool(cc and targets and all((t[0], t[1]) > cc for t in targets))


def arch_support(compute_capability: Any, arch_list: Any) -> Tuple[str, str]:
    """Whether a wheel built for ``arch_list`` has code for a GPU: ("sass", "ptx", "none" or "unknown",
    why).  SASS for X.Y runs on X.Z with Z >= Y, never across majors (sm_XYa only on X.Y); PTX
    (compute_XY, "+PTX") the driver JIT-compiles forward to the GPU."""
    cc = versions.parse_cc(compute_capability)
    if cc is None:
        return "unknown", f"not a compute capability: {compute_capability!r}"
    sass, ptx = parse_arch_list(arch_list)
    name = f"sm_{cc[0]}{cc[1]}"
    runs = sorted(t for t in sass if t[0] == cc[0] and (t[1] == cc[1] if t[2] == "a" else t[1] <= cc[1]))
    if runs:
        best = runs[-1]
        how = "exact match" if best[:2] == cc else f"SASS for {best[0]}.{best[1]} runs on {cc[0]}.{cc[1]} (same major)"
        return "sass", f"{_arch_name(best, 'sm')} covers {name}: {how}"
    if jit := sorted(t for t in ptx if (t[:2] == cc if t[2] == "a" else t[:2] <= cc)):
        best = jit[-1]
        return "ptx", (f"no SASS for {name}; the driver JIT-compiles {_arch_name(best, 'compute')} PTX at first use "
                       "(slow start; needs a driver at least as new as the wheel's CUDA toolkit driver)")
    if not (sass or ptx):
        return "none", "the arch list is empty (a CPU build?)"
    targets = sorted(sass | ptx)
    if older_than_all(cc, arch_list):
        return "none", f"the GPU ({name}) is older than every architecture in the wheel (oldest {_arch_name(targets[0], 'sm')})"
    return "none", (f"no SASS for compute capability {cc[0]}.x at or below {cc[0]}.{cc[1]} and no PTX at or below "
                    f"{cc[0]}.{cc[1]} (wheel has " + " ".join(_arch_name(t, "sm") for t in sorted(sass)) + ")")


