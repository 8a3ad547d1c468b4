# Runs in the target interpreter for `--deep`: imports torch and exercises it.
# Python 3.6+; every step is guarded, and the result is one JSON line.
import json
import os
import sys
import time
import traceback
import warnings

out = {"ok": False, "warnings": [], "errors": {}}


def err(key, exc):
    text = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    out["errors"][key] = text[:500]


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
    try:
        out["cudnn_version"] = torch.backends.cudnn.version()
    except BaseException as exc:  # noqa: BLE001
        err("cudnn_version", exc)
    try:
        out["mkldnn"] = bool(torch.backends.mkldnn.is_available())
    except BaseException as exc:  # noqa: BLE001
        err("mkldnn", exc)
    try:
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except BaseException as exc:  # noqa: BLE001
        err("cpu_capability", exc)
    out["num_threads"] = torch.get_num_threads()
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
    except BaseException as exc:  # noqa: BLE001
        err("cuda_available", exc)
        out["cuda_available"] = False
    try:
        out["arch_list"] = list(torch.cuda.get_arch_list())
    except BaseException as exc:  # noqa: BLE001
        err("arch_list", exc)
    devices = []
    if out.get("cuda"):
        # Initialising CUDA is where error 999 (after suspend) shows itself.
        try:
            torch.cuda.init()
            out["cuda_init"] = "ok"
        except BaseException as exc:  # noqa: BLE001
            err("cuda_init", exc)
            out["cuda_init"] = "failed"
        try:
            out["device_count"] = torch.cuda.device_count()
        except BaseException as exc:  # noqa: BLE001
            err("device_count", exc)
        try:
            out["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except BaseException as exc:  # noqa: BLE001
            err("nccl_version", exc)
    for i in range(out.get("device_count") or 0):
        dev = {"index": i}
        try:
            p = torch.cuda.get_device_properties(i)
            dev["name"] = p.name
            dev["capability"] = "%d.%d" % (p.major, p.minor)
            dev["total_memory"] = int(p.total_memory)
        except BaseException as exc:  # noqa: BLE001
            dev["error"] = "%s: %s" % (type(exc).__name__, exc)
        devices.append(dev)
    out["devices"] = devices

    def exercise(device):
        res = {}
        try:
            a = torch.randn(64, 64, device=device)
            b = (a @ a).sum()
            if device != "cpu":
                torch.cuda.synchronize(device)
            res["matmul"] = "ok" if bool(torch.isfinite(b)) else "not finite"
        except BaseException as exc:  # noqa: BLE001
            res["matmul"] = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        try:
            with torch.no_grad():
                conv = torch.nn.Conv2d(3, 8, 3).to(device)
                x = torch.randn(2, 3, 16, 16, device=device)
                conv(x).sum()
            if device != "cpu":
                torch.cuda.synchronize(device)
            res["conv"] = "ok"
        except BaseException as exc:  # noqa: BLE001
            res["conv"] = "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
        return res

    out["exercise"] = {"cpu": exercise("cpu")}
    for dev in devices:
        if "error" not in dev:
            out["exercise"]["cuda:%d" % dev["index"]] = exercise("cuda:%d" % dev["index"])
    for w in caught:
        out["warnings"].append(str(w.message).strip()[:800])

# The CUDA libraries this process actually mapped (after a convolution).
maps = []
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
