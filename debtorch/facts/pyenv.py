"""PyTorch in a target interpreter, probed in a subprocess of that interpreter.

debtorch never imports torch to describe a machine.  The light probe reads
torch's ``version.py`` and the dist-info folders (torch, nvidia-* wheels) as
text; ``--deep`` runs a second probe that imports torch, initialises CUDA,
runs a tiny matmul and convolution per device and lists the CUDA libraries
the process really mapped.
"""

from __future__ import annotations

import json
from typing import Optional

from debtorch import versions
from debtorch.facts import Context, Section
from debtorch.host import NOT_RECORDED, Host, meaningful_line
from debtorch.probes import source

LIGHT_TIMEOUT = 15.0


def parse_probe_output(stdout: str) -> Optional[dict]:
    """The JSON object on the last line a probe printed.  Never raises."""
    for line in reversed(str(stdout).strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                val = json.loads(line)
            except ValueError:
                return None
            return val if isinstance(val, dict) else None
    return None


# The nvidia-* wheels whose versions say which cuDNN, NCCL and CUDA runtime torch loads.
TORCH_WHEELS = {"cudnn_wheel": "nvidia-cudnn-", "nccl_wheel": "nvidia-nccl-",
                "cuda_runtime_wheel": "nvidia-cuda-runtime-"}


def wheel_version(installed: dict, prefix: str) -> Optional[str]:
    """The version (``installed``: name -> version) of the first distribution whose name starts
    with ``prefix`` (nvidia-cudnn-cu12 ...)."""
    return next((installed[name] for name in sorted(installed) if name.startswith(prefix)), None)


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    python = host.program(ctx.options.python or host.default_python)
    sec["executable"] = python
    sec["requested"] = bool(ctx.options.python)
    calls = [dict(argv=[python, "-c", source("light")], timeout=LIGHT_TIMEOUT, key=f"{python} <probe:light>")]
    if ctx.options.deep:
        # The deep probe imports torch (seconds): start it at once, beside the light one.
        calls.append(dict(argv=[python, "-c", source("deep")], timeout=ctx.options.deep_timeout,
                          key=f"{python} <probe:deep>"))
    results = host.run_all(calls)
    res = results[0]
    data = parse_probe_output(res.stdout) if res.error is None else None
    if data is None:
        reason = res.reason or "the probe printed no JSON"
        if res.error is None and res.returncode == 0 and res.stderr.strip():
            # An exit status other than 0 already names its line (CommandResult.reason).
            reason = f"{reason}: {meaningful_line(res.stderr)}"
        sec.unknown("version", f"could not run {python}: {reason}")
        sec.unknown("torch", "interpreter did not answer")
        return sec
    sec["version"] = data.get("version")
    sec["venv"] = data.get("venv")
    sec["prefix"] = data.get("prefix")
    sec["site_dirs"] = data.get("site_dirs") or []
    dists = data.get("distributions") or {}
    installed = sec["distributions"] = {k: v.get("version") for k, v in sorted(dists.items())}
    sec["libraries"] = data.get("libraries") or []

    t = data.get("torch")
    torch = Section()
    if not t:
        torch["installed"] = False
    else:
        torch["installed"] = True
        torch["location"] = t.get("location")
        version = t.get("version") or (dists.get("torch") or {}).get("version")
        torch.set_or_unknown("version", version, t.get("error") or "torch/version.py has no __version__")
        torch["cuda"] = t.get("cuda")
        torch["hip"] = t.get("hip") or t.get("rocm")
        torch["git_version"] = t.get("git_version")
        torch["variant"] = versions.variant_of(version, torch["cuda"], torch["hip"])
        torch["cpu_only"] = not torch["cuda"] and not torch["hip"]
        torch.update({key: wheel_version(installed, prefix) for key, prefix in TORCH_WHEELS.items()})
    sec["torch"] = dict(torch)

    if ctx.options.deep:
        deep_res = results[1]
        deep = parse_probe_output(deep_res.stdout) if deep_res.error is None else None
        if deep_res.error == NOT_RECORDED:
            # A recording made without --deep: what torch would do there is unknown, not a failure.
            sec.unknown("deep", "the recording has no deep probe (record with --deep)")
        elif deep is None:
            reason = deep_res.reason or "the probe printed no JSON"
            said = meaningful_line(deep_res.stderr, 300) if deep_res.returncode == 0 else ""
            sec["deep"] = {"ok": False, "errors": {"probe": reason + (f": {said}" if said else "")}}
        else:
            sec["deep"] = deep
    else:
        sec["deep"] = None
    return sec
