"""The catalogue of ``debtorch lint``: one :class:`Rule` per id (docs/lint.md).

Like the doctor's findings (Django's system checks): a stable id
(``script.W001``: area, level letter, number; never renumbered), a level, a
one-line message, the fix, and what the finding is about (here the place in
the script).  ``why`` says what the pattern costs; ``source`` is where that
is written down (a row without one fails a test).  Messages and fixes may
carry ``{placeholders}`` filled at the place found (``{call}``: the code).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from debtorch.findings import ERROR, INFO, WARNING, Finding

LOADER_LINE = 'loader = DataLoader(ds, **debtorch.load("debtorch.toml").loader_kwargs(batch_size=...))'
TUNING_GUIDE = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"


@dataclass(frozen=True)
class Rule:
    id: str
    level: str
    message: str
    fix: str
    why: str
    source: str

    def finding(self, about: str = "", **values: str) -> Finding:
        """The finding at one place; ``values`` fill the message's and fix's placeholders."""
        return Finding(self.id, self.level, self.message.format(**values), self.fix.format(**values), about)


SYNC_CALL = Rule(
    "script.W001", WARNING,
    "{call} makes the host wait for the GPU every step",
    "keep the value on the device (e.g. total += loss.detach()) and convert it when you log, "
    "under 'if step % log_every == 0'; to cut the graph use .detach(), not .cpu()",
    "The CPU stops queueing kernels until the GPU has finished all queued work and copied the value back; "
    "the GPU then idles while the host catches up, every step.",
    TUNING_GUIDE + "#avoid-unnecessary-cpu-gpu-synchronization",
)
# W001 for torch.cuda.synchronize(), with its own fix: the call is the wait, there is no value to keep.
SYNCHRONIZE = replace(
    SYNC_CALL,
    fix="drop it from the step: kernels are queued in order without it; to time steps, synchronize only on the "
        "steps you time (under 'if step % log_every == 0') or use torch.cuda.Event(enable_timing=True)",
)
SYNC_CONVERT = Rule(
    "script.W002", WARNING,
    "{call} reads a GPU tensor on the host every step",
    "keep the tensor on the device; convert or print it only when you log, under 'if step % log_every == 0'",
    "float(), int(), bool(), print() and string formatting of a CUDA tensor copy its value to the host, "
    "which waits for every queued kernel.",
    TUNING_GUIDE + "#avoid-unnecessary-cpu-gpu-synchronization",
)
SYNC_BRANCH = Rule(
    "script.W003", WARNING,
    "Python branch on a GPU tensor value ({call}) waits for the GPU every step",
    "decide on the device (torch.where, masking), or check every k steps; "
    "GradScaler already skips steps with inf/NaN gradients",
    "Python needs the truth value on the host, so the tensor is copied back and the host waits for the GPU.",
    TUNING_GUIDE + "#avoid-unnecessary-cpu-gpu-synchronization",
)
BLOCKING_COPY = Rule(
    "script.W004", WARNING,
    "{call} copies a batch without non_blocking=True although the DataLoader pins memory",
    "{fixed}: a copy from pinned memory can then overlap the GPU's work",
    "Pinned memory only pays when the copy is asynchronous; a blocking copy makes the host wait for the "
    "copy and for all work queued before it.",
    "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
)
NO_WORKERS = Rule(
    "script.W005", WARNING,
    "the training DataLoader loads batches in the training process ({detail})",
    "set num_workers (a few per GPU, up to the usable CPUs), or let debtorch tune choose: " + LOADER_LINE,
    "With num_workers=0 every batch is read, decoded and augmented between two steps while the GPU waits.",
    TUNING_GUIDE + "#enable-async-data-loading-and-augmentation",
)
NO_PIN = Rule(
    "script.I001", INFO,
    "the training DataLoader does not pin memory, and this script trains on CUDA",
    "DataLoader(..., pin_memory=True) and copies with .to(device, non_blocking=True); or " + LOADER_LINE,
    "Copies from pageable memory go through a staging buffer and cannot overlap computation.",
    "https://pytorch.org/docs/stable/data.html#memory-pinning",
)
WORKERS_RESTART = Rule(
    "script.I002", INFO,
    "the training DataLoader starts new worker processes every epoch (persistent_workers is off)",
    "DataLoader(..., persistent_workers={persist}); or " + LOADER_LINE,
    "Each epoch forks the workers again and re-imports the dataset in them; the first batches of "
    "every epoch wait for that.",
    "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader",
)
HARDCODED_LOADER = Rule(
    "script.I003", INFO,
    "DataLoader settings fixed in the code ({detail}); the right values depend on the machine",
    "let debtorch tune choose them for each machine: " + LOADER_LINE,
    "The best worker count and prefetch depth depend on the CPUs, the GPU and the storage; "
    "`debtorch tune --write debtorch.toml` measures or derives them per machine.",
    "docs/runtime.md (debtorch.load(...).loader_kwargs())",
)
DATA_PARALLEL = Rule(
    "script.W006", WARNING,
    "{call}: DataParallel is slower than DistributedDataParallel, even on one machine",
    "use DistributedDataParallel, one process per GPU (torchrun); "
    "measure it on your workload with debtorch verify-train --nproc N",
    "DataParallel runs all GPUs from one Python thread (GIL contention), scatters the inputs and replicates "
    "the model every step; PyTorch recommends DDP instead.",
    "https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html",
)
DEPRECATED_AMP = Rule(
    "script.W007", WARNING,
    "{call} is deprecated (FutureWarning on every call)",
    "{replacement}",
    "torch.cuda.amp.autocast/GradScaler/custom_fwd are deprecated since PyTorch 2.4 in favour of the "
    "device-generic torch.amp API; the warning is issued on every call, i.e. every step.",
    "https://pytorch.org/docs/stable/amp.html (torch/cuda/amp/autocast_mode.py, grad_scaler.py)",
)
FP16_UNSCALED = Rule(
    "script.W008", WARNING,
    "{call} runs in float16 but this script has no GradScaler",
    'scaler = torch.amp.GradScaler("cuda"); scaler.scale(loss).backward(); scaler.step(optimizer); '
    'scaler.update(); or autocast with dtype=torch.bfloat16 (no scaler needed, compute capability >= 8.0)',
    "Small float16 gradients underflow to zero without loss scaling: training silently slows or stalls.",
    "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
)
BF16_SCALED = Rule(
    "script.W009", WARNING,
    "{call}: a GradScaler with bfloat16 autocast does work for nothing",
    "drop the GradScaler (or pass enabled=False): bfloat16 has float32's range and needs no loss scaling",
    "Each scaler.step unscales the gradients and reads back an inf/NaN flag: extra kernels and a "
    "host wait every step, for a scale bfloat16 does not need.",
    "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
)
ACCUM_UNDIVIDED = Rule(
    "script.W010", WARNING,
    "gradients are accumulated over {every} micro-batches but the loss is not divided by it",
    "loss = loss / {every} before backward(), so the summed gradient is the mean over the whole batch",
    "Without it the effective learning rate is multiplied by the accumulation steps; "
    "the run diverges or needs a different learning rate than the batch size suggests.",
    "https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation",
)
SCHEDULE_MISMATCH = Rule(
    "script.W011", WARNING,
    "{sched} is sized in {sized} but stepped {stepped}",
    "size and step the schedule in optimizer steps: {fix_size}, and call {name}.step() after each "
    "optimizer.step()",
    "Sized in micro-batches but stepped once per optimizer step, the schedule never reaches its "
    "annealing phase; sized in optimizer steps but stepped every micro-batch, OneCycleLR raises "
    "(Tried to step ... times) and others end early.",
    "https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.OneCycleLR.html",
)
DDP_ACCUM_SYNC = Rule(
    "script.W012", WARNING,
    "DDP all-reduces the gradients at every micro-batch ({call}); the optimizer steps {when}",
    "run the forward and backward of the micro-batches that do not step under model.no_sync() "
    "(contextlib.nullcontext() on the one that steps); the gradients are then all-reduced once per optimizer step",
    "Every backward of a DistributedDataParallel model all-reduces the gradients across the ranks; with "
    "gradient accumulation only the last micro-batch before optimizer.step() needs it, the others are "
    "network traffic and waiting for nothing.",
    "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"
    " (DistributedDataParallel.no_sync)",
)
OLD_PROFILER = Rule(
    "script.I004", INFO,
    "{call} is the legacy autograd profiler",
    "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
    "schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)); "
    "or debtorch verify-train --profile DIR",
    "torch.profiler records CUDA kernels and the DataLoader, profiles a window of steps with a schedule "
    "and exports Perfetto traces.",
    "https://pytorch.org/docs/stable/profiler.html",
)
NVPROF = Rule(
    "script.I005", INFO,
    "nvprof does not profile GPUs of compute capability 8.0 and newer",
    "nsys profile -t cuda,nvtx python train.py (Nsight Systems), or torch.profiler",
    "nvprof and the Visual Profiler are deprecated and do not support Ampere or newer GPUs.",
    "https://docs.nvidia.com/cuda/profiler-users-guide/index.html",
)
CUDNN_BENCHMARK = Rule(
    "script.I006", INFO,
    "convolutional model trained on CUDA without torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.benchmark = True when input shapes are fixed; or cfg.configure_torch(), where "
    'cfg = debtorch.load("debtorch.toml") (docs/runtime.md)',
    "With fixed input shapes, cuDNN's autotuner picks the fastest convolution algorithm once; "
    "without it the default heuristics may choose a slower one for every step.",
    TUNING_GUIDE + "#enable-cudnn-auto-tuner",
)
CRASHED = Rule(
    "script.E001", ERROR,
    "debtorch lint failed on this file ({error})",
    "please report it with the file; the other rules' findings are still listed",
    "A rule raised an exception; this finding stands in for it.",
    "debtorch's issue tracker",
)

RULES = (SYNC_CALL, SYNC_CONVERT, SYNC_BRANCH, BLOCKING_COPY, NO_WORKERS, NO_PIN, WORKERS_RESTART,
         HARDCODED_LOADER, DATA_PARALLEL, DEPRECATED_AMP, FP16_UNSCALED, BF16_SCALED, ACCUM_UNDIVIDED,
         SCHEDULE_MISMATCH, DDP_ACCUM_SYNC, OLD_PROFILER, NVPROF, CUDNN_BENCHMARK, CRASHED)
BY_ID = {r.id: r for r in RULES}

# The rules that say "the host waits for the GPU here" (verify-train's host waits).
SYNC_IDS = (SYNC_CALL.id, SYNC_CONVERT.id, SYNC_BRANCH.id)

# TorchFix's findings keep their codes under this area: torchfix.TOR101, ...
TORCHFIX_AREA = "torchfix"
