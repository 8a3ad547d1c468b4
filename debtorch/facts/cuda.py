"""CUDA library facts: the toolkit's nvcc, CUDA_HOME, and every copy of the CUDA libraries a
PyTorch process could load, in the loader's order (docs/facts.md): ``LD_LIBRARY_PATH`` first (a
cuDNN there shadows the nvidia-cudnn wheel, pytorch/pytorch#104591), then the RUNPATH of torch's
libraries (the nvidia-* wheels, ``torch/lib``), then the linker cache (``ldconfig -p``).

``nvcc`` is the CUDA *toolkit's* compiler, which PyTorch wheels never use at run time: the field
is ``toolkit_nvcc`` so that nobody mistakes it for "the CUDA runtime version" (pytorch/pytorch#78489).
"""

from __future__ import annotations

import json
import posixpath
import re
import threading
import weakref
from typing import Iterable, Optional

from debtorch import versions
from debtorch.facts import Context, Section
from debtorch.facts.pyenv import wheel_version
from debtorch.host import COMMAND_NOT_FOUND, Host, Unavailable

# The libraries whose copies matter to a PyTorch process, by family.
LIB_NAME = re.compile(
    r"^lib(?P<family>cudart|cudnn(?:_[a-z_]+)?|nccl|cuda|nvidia-ml|cublasLt|cublas|nvrtc|nvJitLink|cusparse|cufft)"
    r"\.so(?:\.(?P<version>\d+(?:\.\d+)*))?$"
)
LDCONFIG_TIMEOUT = 5.0
NVCC_TIMEOUT = 10.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Light probe directories under site-packages/nvidia/ -> PyPI distribution prefix.
_WHEEL_DIST = {
    "cudnn": "nvidia-cudnn-",
    "nccl": "nvidia-nccl-",
    "cuda_runtime": "nvidia-cuda-runtime-",
    "cublas": "nvidia-cublas-",
    "cuda_nvrtc": "nvidia-cuda-nvrtc-",
    "nvjitlink": "nvidia-nvjitlink-",
    "cusparse": "nvidia-cusparse-",
    "cufft": "nvidia-cufft-",
}


# ---------------------------------------------------------------------------
# Parsers (pure functions of text; never raise)


def parse_ldconfig(text: str) -> list[dict]:
    """``ldconfig -p`` -> [{name, flags, path}] in the cache's order.  Never raises.

    A line looks like ``\\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1``
    (flags may also carry ``hwcap: ...`` or ``OS ABI: ...``).
    """
    out = []
    for line in str(text).splitlines():
        m = re.match(r"^\s+(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$", line)
        if m:
            out.append({"name": m.group(1), "flags": m.group(2), "path": m.group(3)})
    return out


def lib_family(filename: str) -> Optional[str]:
    """'libcudnn_ops.so.9' -> 'cudnn'; 'libcuda.so.1' -> 'cuda'; others -> None.  Never raises."""
    m = LIB_NAME.match(posixpath.basename(str(filename)))
    if not m:
        return None
    fam = m.group("family")
    return "cudnn" if fam.startswith("cudnn") else fam


def parse_nvcc_version(text: str) -> Optional[dict]:
    """``nvcc --version`` -> {release: '12.4', version: '12.4.131'}.  Never raises."""
    m = re.search(r"release\s+(\d+\.\d+)\s*,\s*V(\d+(?:\.\d+)*)", str(text))
    return {"release": m.group(1), "version": m.group(2)} if m else None


def shadowed(ld_copies: list[dict], wheel_copies: list[dict]) -> list[dict]:
    """LD_LIBRARY_PATH copies whose file name (the soname) matches a wheel's copy.

    The loader finds the LD_LIBRARY_PATH copy first (pytorch/pytorch#104591).
    """
    by_name: dict = {}
    for copy in wheel_copies:
        by_name.setdefault(copy["name"], copy)
    out = []
    for c in ld_copies:
        w = by_name.get(c["name"])
        if w is None:
            continue
        out.append(
            {
                "name": c["name"],
                "library": c.get("library"),
                "ld_library_path_copy": c["path"],
                "ld_library_path_version": c.get("version"),
                "wheel_copy": w["path"],
                "wheel_version": w.get("package_version") or w.get("version"),
            }
        )
    return out


# ---------------------------------------------------------------------------
# Reading through the host


def resolve_link(host: Host, path: str, max_hops: int = 16) -> str:
    """Follow symbolic links at the end of ``path`` (``readlink``, so a
    recording captures each hop).  Never raises."""
    cur = posixpath.normpath(path)
    for _ in range(max_hops):
        try:
            target = host.readlink(cur)
        except Unavailable:
            return cur
        cur = posixpath.normpath(target if target.startswith("/") else posixpath.join(posixpath.dirname(cur), target))
    return cur


_ld_lock = threading.Lock()
_ld_memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def linker_cache(host: Host) -> tuple[Optional[list[dict]], str]:
    """The linker cache entries (``ldconfig -p``), run once per host: the
    ``nvidia`` and ``cuda`` sections both read it.  (entries, reason)."""
    with _ld_lock:
        if host in _ld_memo:
            return _ld_memo[host]
        # ldconfig lives in /sbin, which is not on a Debian user's PATH.
        res = host.run(["/sbin/ldconfig", "-p"], timeout=LDCONFIG_TIMEOUT, key="ldconfig -p")
        if res.error == COMMAND_NOT_FOUND and host.live:
            res = host.run(["ldconfig", "-p"], timeout=LDCONFIG_TIMEOUT, key="ldconfig -p")
        if res.ok:
            result: tuple = (parse_ldconfig(res.stdout), "")
        else:
            result = (None, f"ldconfig -p: {res.reason}")
        _ld_memo[host] = result
        return result


def cached_libraries(host: Host, families: Optional[Iterable[str]] = None) -> tuple[Optional[list[dict]], str]:
    """Tracked libraries in the linker cache, each with the file its name
    resolves to and the version in that file's name."""
    entries, reason = linker_cache(host)
    if entries is None:
        return None, reason
    out = []
    for e in entries:
        fam = lib_family(e["name"])
        if fam is None or (families and fam not in families):
            continue
        real = resolve_link(host, e["path"])
        out.append(
            {
                "name": e["name"],
                "library": fam,
                "path": e["path"],
                "real_path": real,
                "version": versions.library_version(real) or versions.library_version(e["name"]),
                "arch": e["flags"],
            }
        )
    return out, ""


def _find_nvcc(host: Host) -> tuple[Optional[str], Optional[str]]:
    path = host.environ.get("PATH") or DEFAULT_PATH
    for d in path.split(":"):
        if d and d.startswith("/") and host.exists(posixpath.join(d, "nvcc")):
            return posixpath.join(d, "nvcc"), "PATH"
    d = "/usr/local/cuda/bin"
    return (posixpath.join(d, "nvcc"), d) if host.exists(posixpath.join(d, "nvcc")) else (None, None)


def _wheel_copies(py: dict) -> list[dict]:
    dists = py.get("distributions") or {}
    out = []
    for path in py.get("libraries") or []:
        name = posixpath.basename(path)
        fam = lib_family(name)
        if fam is None:
            continue
        # The part after site-packages: nvidia/<sub>/lib/<name> or torch/lib/<name>.
        parts = path.split("/")
        roots = [i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages")]
        inner = parts[roots[-1] + 1:] if roots else parts[-4:]
        source = "torch/lib" if inner[:2] == ["torch", "lib"] else "nvidia wheel"
        prefix = _WHEEL_DIST.get(inner[1]) if len(inner) >= 3 and inner[0] == "nvidia" else None
        package_version = wheel_version(dists, prefix) if prefix else None
        out.append(
            {
                "name": name,
                "library": fam,
                "path": path,
                "version": versions.library_version(name),
                "package_version": package_version,
                "source": source,
            }
        )
    return out


def _ld_library_path_copies(host: Host) -> tuple[list[dict], list[dict]]:
    ld = host.environ.get("LD_LIBRARY_PATH") or ""
    dirs, copies = [], []
    seen = set()
    for d in ld.split(":"):
        if not d or d in seen:
            continue
        seen.add(d)
        try:
            names = host.listdir(d)
        except Unavailable as exc:
            dirs.append({"dir": d, "readable": False, "reason": exc.reason})
            continue
        dirs.append({"dir": d, "readable": True})
        for name in names:
            fam = lib_family(name)
            if fam is None or versions.library_version(name) is None:
                continue  # the unversioned dev symlink (libcudnn.so) is not what the loader asks for
            full = posixpath.join(d, name)
            real = resolve_link(host, full)
            copies.append(
                {"name": name, "library": fam, "path": full, "real_path": real,
                 "version": versions.library_version(real) or versions.library_version(name), "dir": d}
            )
    return dirs, copies


def _local_toolkits(host: Host) -> list[dict]:
    out = []
    for name in host.try_listdir("/usr/local"):
        if not re.fullmatch(r"cuda-\d+(?:\.\d+)*", name):
            continue
        path = f"/usr/local/{name}"
        version = None
        text = host.try_read(f"{path}/version.json")
        if text:
            try:
                version = (json.loads(text).get("cuda") or {}).get("version")
            except (ValueError, AttributeError):
                version = None
        out.append({"path": path, "version": version or name.split("-", 1)[1]})
    return out


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()

    nvcc, found_via = _find_nvcc(host)
    if nvcc is None:
        sec.unknown("toolkit_nvcc", "no nvcc on PATH or in /usr/local/cuda/bin (no CUDA toolkit; PyTorch wheels do not need one)")
    else:
        res = host.run([nvcc, "--version"], timeout=NVCC_TIMEOUT)
        parsed = parse_nvcc_version(res.stdout) if res.ok else None
        if parsed is None:
            sec.unknown("toolkit_nvcc", f"{nvcc} --version: {res.reason or 'unrecognised output'}")
        else:
            parsed.update({"path": nvcc, "found_via": found_via, "real_path": resolve_link(host, nvcc)})
            sec["toolkit_nvcc"] = parsed

    env = host.environ
    sec["cuda_home"] = {
        "CUDA_HOME": env.get("CUDA_HOME"),
        "CUDA_PATH": env.get("CUDA_PATH"),
        # Where /usr/local/cuda leads (Debian's alternatives add a hop through /etc/alternatives).
        "usr_local_cuda": resolve_link(host, "/usr/local/cuda") if host.is_dir("/usr/local/cuda") else None,
    }
    sec["local_toolkits"] = _local_toolkits(host)

    cached, reason = cached_libraries(host)
    sec.set_or_unknown("linker_cache", cached, reason)

    py = ctx.section("python") if ctx is not None else {}
    if py.get("libraries") is None and (py.get("unknown") or {}):
        sec.unknown("wheel_libraries", "the target interpreter did not answer")
        wheels: list = []
    else:
        wheels = _wheel_copies(py)
        sec["wheel_libraries"] = wheels

    dirs, ld_copies = _ld_library_path_copies(host)
    sec["ld_library_path_dirs"] = dirs
    sec["ld_library_path"] = ld_copies
    sec["shadowing"] = shadowed(ld_copies, wheels)
    return sec
