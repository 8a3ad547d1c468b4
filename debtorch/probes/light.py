# Runs in the target interpreter.  Must not import torch; Python 3.6+.  (Types are in comments, of
# builtins only: importing typing would cost the probe a third of its imports' time.)
import json
import os
import re
import sys

WANTED = re.compile(
    r"^(torch|torchvision|torchaudio|triton|pytorch_triton\w*|numpy|nvidia_[a-z0-9_]+|nvidia_ml_py|pynvml"
    r"|deepspeed|accelerate|lightning|pytorch_lightning)-([^-]+)\.(dist-info|egg-info)$",
    re.I,
)
LIB = re.compile(r"^lib(cudart|cudnn|nccl|cublas|cuda|nvrtc|cusparse|cufft|nvJitLink)[^/]*\.so[.0-9]*$")

site_dirs = []  # type: list[str]
distributions = {}  # type: dict[str, dict[str, str]]
libraries = []  # type: list[str]
torch_info = None  # type: dict[str, object] | None


def listing(path):
    # type: (str) -> list[str]
    """The sorted names in a folder; none when it is missing or unreadable."""
    try:
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    except OSError:
        return []


seen = set()
for d in sys.path:
    if not d or not os.path.isdir(d) or d in seen:
        continue
    seen.add(d)
    if not (d.endswith("site-packages") or d.endswith("dist-packages")):
        continue
    site_dirs.append(d)
    for n in listing(d):
        m = WANTED.match(n)
        if m:
            key = m.group(1).lower().replace("_", "-")
            distributions.setdefault(key, {"version": m.group(2), "location": d})
    # An unreadable folder costs its own listing, never the whole probe.
    nv = os.path.join(d, "nvidia")
    for sub in listing(nv):
        libdir = os.path.join(nv, sub, "lib")
        for f in listing(libdir):
            if LIB.match(f):
                libraries.append(os.path.join(libdir, f))
    tlib = os.path.join(d, "torch", "lib")
    for f in listing(tlib):
        if LIB.match(f) or f.startswith("libtorch_cuda") or f.startswith("libtorch_hip"):
            libraries.append(os.path.join(tlib, f))

# torch's own version file, read as text: importing torch takes seconds.
for d in site_dirs + [p for p in sys.path if p and p not in site_dirs]:
    vf = os.path.join(d, "torch", "version.py")
    if os.path.isfile(vf):
        info = {"location": os.path.join(d, "torch")}  # type: dict[str, object]
        try:
            with open(vf) as fh:
                text = fh.read()
        except OSError as exc:
            info["error"] = str(exc)
            text = ""
        for key in ("__version__", "cuda", "hip", "rocm", "xpu", "git_version", "debug"):
            m = re.search(r"^%s\s*(?::[^=]*)?=\s*(.+?)\s*$" % re.escape(key), text, re.M)
            if m:
                raw = m.group(1)
                info[key.strip("_")] = {"None": None, "False": False, "True": True}.get(raw, raw.strip("'\""))
        torch_info = info
        break

prefix = sys.prefix
base_prefix = getattr(sys, "base_prefix", sys.prefix)
print(json.dumps({
    "executable": sys.executable,
    "version": "%d.%d.%d" % tuple(sys.version_info[:3]),
    "prefix": prefix,
    "base_prefix": base_prefix,
    "site_dirs": site_dirs,
    "distributions": distributions,
    "torch": torch_info,
    "libraries": libraries,
    "venv": prefix != base_prefix,
}))
