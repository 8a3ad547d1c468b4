# Runs in the target interpreter for `--deep`: imports torch and exercises it.
# Python 3.6+; every step is guarded, and the result is one JSON line.  (Types are in comments.)
import json
import os
import sys
import time
import traceback
import warnings
from typing import Any, Callable  # noqa: F401 - the type comments' names (torch imports typing anyway)

errors = {}  # type: dict[str, str]
said = []  # type: list[str]
out = {"ok": False, "warnings": said, "errors": errors}  # type: dict[str, object]


def first_line(exc):
    # type: (BaseException) -> str
    text = str(exc).strip()
    return "%s: %s" % (type(exc).__name__, text.splitlines()[0] if text else "")


def err(key, exc):
    # type: (str, BaseException) -> None
    errors[key] = first_line(exc)[:500]


def attempt(key, get, failed=None):
    # type: (str, Callable[[], object], object) -> None
    """out[key] = get(); when it raises, the error under out["errors"][key] (and out[key] = failed, if given)."""
    try:
        out[key] = get()
    except BaseException as exc:  # noqa: BLE001 - a failing step is a fact
        err(key, exc)
        if failed is not None:
            out[key] = failed


t0 = time.time()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import torch
    except BaseException as exc:  # noqa: BLE001 - a broken torch is a fact
        err("import", exc)
        out["import_traceback"] = traceback.format_exc()[-2000:]
        print(json.dumps(out))
        sys.exit(0)
    out["import_seconds"] = round(time.time() - t0, 3)
    out["version"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["hip"] = getattr(torch.version, "hip", None)
    out["debug"] = getattr(torch.version, "debug", None)
    attempt("cudnn_version", torch.backends.cudnn.version)
    attempt("mkldnn", lambda: bool(torch.backends.mkldnn.is_available()))
    attempt("cpu_capability", torch.backends.cpu.get_cpu_capability)
    out["num_threads"] = torch.get_num_threads()
    attempt("cuda_available", lambda: bool(torch.cuda.is_available()), False)
    attempt("arch_list", lambda: list(torch.cuda.get_arch_list()))
    devices = []  # type: list[dict[str, object]]
    usable = []  # type: list[int]  # the devices whose properties could be read
    if out.get("cuda"):
        # Initialising CUDA is where error 999 (after suspend) shows itself.
        attempt("cuda_init", lambda: torch.cuda.init() or "ok", "failed")
        attempt("device_count", torch.cuda.device_count)
        attempt("nccl_version", lambda: ".".join(str(x) for x in torch.cuda.nccl.version()))
    count = out.get("device_count")  # absent when torch could not say
    for i in range(count if isinstance(count, int) else 0):
        dev = {"index": i}  # type: dict[str, object]
        try:
            p = torch.cuda.get_device_properties(i)
            dev["name"] = p.name
            dev["capability"] = "%d.%d" % (p.major, p.minor)
            dev["total_memory"] = int(p.total_memory)
        except BaseException as exc:  # noqa: BLE001
            dev["error"] = "%s: %s" % (type(exc).__name__, exc)
        else:
            usable.append(i)
        devices.append(dev)
    out["devices"] = devices

    def exercise(device):
        # type: (str) -> dict[str, str]
        def run(work, verdict=lambda _: "ok"):
            # type: (Callable[[], Any], Callable[[Any], str]) -> str
            try:
                result = work()
                if device != "cpu":
                    torch.cuda.synchronize(device)
                return verdict(result)
            except BaseException as exc:  # noqa: BLE001
                return first_line(exc)

        def conv():
            # type: () -> None
            with torch.no_grad():
                torch.nn.Conv2d(3, 8, 3).to(device)(torch.randn(2, 3, 16, 16, device=device)).sum()

        def matmul():
            # type: () -> torch.Tensor
            a = torch.randn(64, 64, device=device)
            return (a @ a).sum()

        return {"matmul": run(matmul, lambda b: "ok" if bool(torch.isfinite(b)) else "not finite"), "conv": run(conv)}

    exercised = {"cpu": exercise("cpu")}
    out["exercise"] = exercised
    for i in usable:
        exercised["cuda:%d" % i] = exercise("cuda:%d" % i)
    for w in caught:
        said.append(str(w.message).strip()[:800])

# The CUDA libraries this process actually mapped (after a convolution).
maps = []  # type: list[str]
try:
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 6:
                path = parts[5]
                base = os.path.basename(path)
                if base.startswith(("libcudart", "libcudnn", "libnccl", "libcuda.", "libcublas", "libnvidia-ml",
                                    "libnvrtc", "libamdhip", "libtorch_cuda")) and path not in maps:
                    maps.append(path)
except OSError as exc:
    err("maps", exc)
out["mapped_libraries"] = maps
out["ok"] = True
print(json.dumps(out))
# Leave without torch's interpreter teardown (destructors, library unloading): it costs about
# 0.3 s and tells us nothing.  Everything is printed; the kernel releases the rest.
sys.stdout.flush()
os._exit(0)
