"""Workloads: what the engine trains (in the target interpreter; torch and the standard library only).
``--workload module:function`` names a function returning a :class:`Workload` or a dict of its fields
(the contract: docs/workloads.md).  The built-ins are deterministic by seed, sized so that a trial
on a 2-core CPU takes seconds, their data costs CPU per item like a real pipeline, and their labels
come from a fixed random teacher, so the loss really falls.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from debtorch import outputs
from debtorch.transport.server import one_line as _one_line

REQUIRED = ("model", "dataset", "loss_fn", "batch_size")
EXPECTED = "expected a Workload or dict with model, dataset, loss_fn, batch_size"


@dataclass
class Workload:
    model: nn.Module                       # what is trained
    dataset: Any                           # map-style: __len__ and __getitem__ -> (inputs, target)
    loss_fn: Callable                      # loss_fn(output, target) -> scalar loss tensor
    batch_size: int                        # samples per step per process
    name: Optional[str] = None             # a label for reports (default: the spec)
    target_loss: Optional[float] = None    # time-to-target threshold (smoothed training loss)
    lr: Optional[float] = None             # AdamW learning rate (default 1e-3)
    convolutional: bool = False            # 4-D image inputs: channels_last applies
    collate_fn: Optional[Callable] = None  # DataLoader collate_fn (default: PyTorch's)

    def describe(self) -> dict:
        """JSON-ready summary for the worker's ``load`` response."""
        return {"name": self.name, "batch_size": self.batch_size, "dataset_len": len(self.dataset),
                "parameters": sum(p.numel() for p in self.model.parameters()), "target_loss": self.target_loss,
                "lr": self.lr, "convolutional": self.convolutional, "model_class": type(self.model).__name__}


class WorkloadError(Exception):
    """A workload that cannot be loaded; the message is one line for the user."""


# ---------------------------------------------------------------------------
# Loading a workload by its spec


def load_workload(spec: str, options: Optional[dict] = None, seed: int = 0) -> Workload:
    """Import ``module:function``, call it with ``options`` (after ``torch.manual_seed(seed)``: model
    initialisation is deterministic) and validate the result; every failure a one-line WorkloadError."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise WorkloadError(f"workload {spec!r} must be module:function (e.g. mymod:make or builtin:cnn)")
    modname, funcname = spec.split(":")
    if modname == "builtin":
        func = BUILTINS.get(funcname)
        if func is None:
            raise WorkloadError(f"no built-in workload {funcname!r}; built-ins: {', '.join(sorted(BUILTINS))}")
    else:
        if os.getcwd() not in sys.path:
            # The working folder holds the user's module: searched last, so that nothing there
            # replaces a module of Python or of the venv (docs/security.md).
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(modname)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see, in one line
            raise WorkloadError(f"cannot import {modname} (from {spec}): {_one_line(exc)}") from None
        func = getattr(module, funcname, None)
        if func is None:
            raise WorkloadError(f"{modname} has no function {funcname} (from {spec})")
        if not callable(func):
            raise WorkloadError(f"{spec} is a {type(func).__name__}, not a function")
    torch.manual_seed(seed)
    try:
        made = func(**(options or {}))
    except WorkloadError:
        raise  # already one line about this workload
    except TypeError as exc:
        raise WorkloadError(f"{spec} could not be called with options {sorted(options or {})}: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{spec} raised {_one_line(exc)}") from None
    workload = coerce(made, spec)
    if workload.name is None:
        workload.name = spec
    return workload


def coerce(made: Any, spec: str) -> Workload:
    """A validated :class:`Workload` from what a workload function returned."""
    if isinstance(made, Workload):
        data = {f.name: getattr(made, f.name) for f in fields(Workload)}
    elif isinstance(made, dict):
        known = {f.name for f in fields(Workload)}
        unknown = sorted(k for k in made if k not in known)
        if unknown:
            raise WorkloadError(f"{spec} returned unknown key {unknown[0]!r}; {EXPECTED}")
        missing = [k for k in REQUIRED if k not in made]
        if missing:
            raise WorkloadError(f"{spec} returned a dict without {', '.join(missing)}; {EXPECTED}")
        data = dict(made)
    else:
        raise WorkloadError(f"{spec} returned {_a(type(made).__name__)}; {EXPECTED}")
    wl = Workload(**data)
    if not isinstance(wl.model, nn.Module):
        raise WorkloadError(f"{spec}: model is {_a(type(wl.model).__name__)}; expected a torch.nn.Module")
    if not any(p.requires_grad for p in wl.model.parameters()):
        raise WorkloadError(f"{spec}: model has no trainable parameters")
    if not (hasattr(wl.dataset, "__getitem__") and hasattr(wl.dataset, "__len__")):
        raise WorkloadError(f"{spec}: dataset is {_a(type(wl.dataset).__name__)}; expected a map-style Dataset (__len__ and __getitem__)")
    if not callable(wl.loss_fn):
        raise WorkloadError(f"{spec}: loss_fn is {_a(type(wl.loss_fn).__name__)}; expected a function (output, target) -> loss")
    if isinstance(wl.batch_size, bool) or not isinstance(wl.batch_size, int) or wl.batch_size < 1:
        raise WorkloadError(f"{spec}: batch_size is {wl.batch_size!r}; expected an integer >= 1")
    try:
        n = len(wl.dataset)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(f"{spec}: len(dataset) raised {_one_line(exc)}") from None
    if n < wl.batch_size:
        raise WorkloadError(f"{spec}: dataset has {n} samples, fewer than one batch of {wl.batch_size}")
    for key in ("target_loss", "lr"):
        val = getattr(wl, key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))):
            raise WorkloadError(f"{spec}: {key} is {val!r}; expected a number")
    if wl.lr is not None and wl.lr <= 0:
        raise WorkloadError(f"{spec}: lr is {wl.lr!r}; expected a number > 0")
    if wl.collate_fn is not None and not callable(wl.collate_fn):
        raise WorkloadError(f"{spec}: collate_fn is {_a(type(wl.collate_fn).__name__)}; expected a function")
    wl.convolutional = bool(wl.convolutional)
    return wl


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


# ---------------------------------------------------------------------------
# builtin:cnn


class _Teacher(nn.Module):
    """A fixed random network from a latent vector to class logits."""

    def __init__(self, latent: int, classes: int, generator: torch.Generator):
        super().__init__()
        self.w1 = torch.randn(latent, 64, generator=generator) / math.sqrt(latent)
        self.w2 = torch.randn(64, classes, generator=generator) / 8.0

    def labels(self, z: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(z @ self.w1) @ self.w2).argmax(dim=1)


class SyntheticImages(torch.utils.data.Dataset):
    """Images "decoded" from latent vectors (a flip-symmetric low-resolution basis mixed by the
    latent, upsampled to ``raw`` pixels, texture noise: a uint8 image as a JPEG decoder gives), then
    augmented per item (random resized crop to ``size``, flip, colour jitter, normalisation) and
    labelled by a teacher.  Seeded by (seed, index): an item is the same in every process."""

    def __init__(self, samples: int = 4096, size: int = 64, raw: int = 128, latent: int = 8,
                 classes: int = 10, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        basis = torch.randn(latent, 3, 6, 6, generator=g)
        self.basis = (basis + basis.flip(-1)) / 2  # flips keep the label
        self.latents = torch.randn(samples, latent, generator=g)
        self.targets = _Teacher(latent, classes, g).labels(self.latents)
        self.size, self.raw, self.seed = size, raw, seed

    def __len__(self) -> int:
        return len(self.latents)

    def decode(self, index: int, g: Optional[torch.Generator] = None) -> torch.Tensor:
        """The item's raw uint8 image (3, raw, raw), as a decoder would give it."""
        g = g or torch.Generator().manual_seed(self.seed * 1_000_003 + int(index))
        raw = self.raw
        low = torch.einsum("l,lchw->chw", self.latents[index], self.basis)[None]
        img = F.interpolate(low, size=(raw, raw), mode="bicubic", align_corners=False)[0]
        img = img + 0.3 * torch.randn(3, raw, raw, generator=g)
        return (img * 40 + 128).clamp(0, 255).to(torch.uint8)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(index))
        raw = self.raw
        img = self.decode(index, g)
        y0, x0, side = _crop_box(g, raw)
        crop = img[:, y0:y0 + side, x0:x0 + side].float()[None]
        out = F.interpolate(crop, size=(self.size, self.size), mode="bilinear", align_corners=False, antialias=True)[0]
        if float(torch.rand((), generator=g)) < 0.5:
            out = out.flip(-1)
        bright, contrast, sat = (0.8 + 0.4 * torch.rand(3, generator=g)).tolist()
        out = out * bright
        mean = out.mean()
        out = (out - mean) * contrast + mean
        gray = out.mean(0, keepdim=True)
        out = (out - gray) * sat + gray
        out = (out / 255.0 - 0.5) / 0.25
        return out, self.targets[index]


def _crop_box(g: torch.Generator, raw: int) -> tuple:
    """A random resized crop's box (scale 0.6-1 of the area, square): (top, left, side)."""
    scale = 0.6 + 0.4 * float(torch.rand((), generator=g))
    side = int(raw * math.sqrt(scale))
    y0 = int(torch.randint(0, raw - side + 1, (), generator=g))
    x0 = int(torch.randint(0, raw - side + 1, (), generator=g))
    return y0, x0, side


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class SmallResNet(nn.Module):
    """A stem and three residual blocks (widths w, 2w, 4w), pooled, then linear."""

    def __init__(self, width: int = 32, classes: int = 10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.blocks = nn.Sequential(_Block(w, w, 1), _Block(w, 2 * w, 2), _Block(2 * w, 4 * w, 2))
        self.head = nn.Linear(4 * w, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def cnn(samples: int = 4096, size: int = 64, width: int = 32, batch_size: int = 32, seed: int = 0,
        raw: Optional[int] = None) -> Workload:
    """The built-in CNN workload (see the module docstring)."""
    return _resnet("builtin:cnn", SyntheticImages(samples=samples, size=size, raw=raw or size * 2, seed=seed), width,
                   batch_size)


def _resnet(name: str, dataset: Any, width: int, batch_size: int) -> Workload:
    """The small ResNet on an image dataset: builtin:cnn and builtin:images differ only in their data."""
    return Workload(model=SmallResNet(width=width), dataset=dataset, loss_fn=F.cross_entropy, batch_size=batch_size,
                    name=name, target_loss=1.0, lr=2e-3, convolutional=True)


# ---------------------------------------------------------------------------
# builtin:images: the same network, fed by decoding image files from disk


def _pillow() -> Any:
    try:
        import PIL.Image  # Pillow: optional, only this workload decodes files
    except ImportError:
        raise WorkloadError(f"builtin:images needs Pillow in {sys.executable}: pip install pillow "
                            "(or debtorch[torch])") from None
    return PIL.Image


class ImageFiles(torch.utils.data.Dataset):
    """JPEG files (:class:`SyntheticImages`' images and labels, written once into ``folder``),
    decoded with Pillow in ``__getitem__`` and augmented there (random resized crop, flip,
    normalisation); seeded by (seed, index)."""

    def __init__(self, folder: str, labels: torch.Tensor, size: int = 64, seed: int = 0):
        self.folder, self.targets, self.size, self.seed = folder, labels, size, seed
        self.image = _pillow()

    def __len__(self) -> int:
        return len(self.targets)

    def path(self, index: int) -> str:
        return os.path.join(self.folder, f"{index:06d}.jpg")

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(index) + 17)
        with self.image.open(self.path(index)) as f:
            img = f.convert("RGB")
        y0, x0, side = _crop_box(g, min(img.size))
        img = img.resize((self.size, self.size), self.image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
        if float(torch.rand((), generator=g)) < 0.5:
            img = img.transpose(self.image.FLIP_LEFT_RIGHT)
        out = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(self.size, self.size, 3)
        out = out.permute(2, 0, 1).float()
        return (out / 255.0 - 0.5) / 0.25, self.targets[index]


def write_images(source: SyntheticImages, folder: str, quality: int = 90) -> None:
    """Write every item of ``source`` as a JPEG into ``folder``, whole or not at all: into a
    temporary folder beside it, renamed into place (another process that got there first wins)."""
    image = _pillow()
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".writing-", dir=parent)
    try:
        for i in range(len(source)):
            hwc = source.decode(i).permute(1, 2, 0).contiguous()
            image.frombytes("RGB", (source.raw, source.raw), _bytes(hwc)).save(os.path.join(tmp, f"{i:06d}.jpg"),
                                                                               quality=quality)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not os.path.isdir(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bytes(t: torch.Tensor) -> bytes:
    """A uint8 tensor's bytes: through numpy when torch has it, else a (slower) list."""
    try:
        return t.numpy().tobytes()
    except (RuntimeError, TypeError):  # torch built without numpy support, or numpy missing
        return bytes(t.flatten().tolist())


def images(samples: int = 512, size: int = 64, raw: int = 448, width: int = 32, batch_size: int = 32,
           seed: int = 0, folder: Optional[str] = None) -> Workload:
    """The built-in data-bound workload: builtin:cnn's network on JPEG files decoded each step."""
    _pillow()
    source = SyntheticImages(samples=samples, size=size, raw=raw, seed=seed)
    folder = folder or os.path.join(outputs.cache_dir(), f"images-{samples}x{raw}-seed{seed}")
    if not os.path.isdir(folder):
        try:
            write_images(source, folder)
        except OSError as exc:
            raise WorkloadError(f"builtin:images cannot write its images into {folder}: "
                                f"{exc.strerror or exc} (set DEBTORCH_CACHE to a writable folder)") from None
    return _resnet("builtin:images", ImageFiles(folder, source.targets, size=size, seed=seed), width, batch_size)


# ---------------------------------------------------------------------------
# builtin:transformer


class SyntheticSequences(torch.utils.data.Dataset):
    """Token sequences drawn from a latent topic, labelled by a teacher on the topic."""

    def __init__(self, samples: int = 4096, length: int = 64, vocab: int = 256, latent: int = 8,
                 classes: int = 10, seed: int = 0):
        g = torch.Generator().manual_seed(seed + 7919)
        self.topics = torch.randn(latent, vocab, generator=g)
        self.latents = torch.randn(samples, latent, generator=g)
        self.targets = _Teacher(latent, classes, g).labels(self.latents)
        self.length, self.seed = length, seed

    def __len__(self) -> int:
        return len(self.latents)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(index))
        probs = torch.softmax(self.latents[index] @ self.topics, dim=0)
        tokens = torch.multinomial(probs, self.length, replacement=True, generator=g)
        return tokens, self.targets[index]


class SmallTransformer(nn.Module):
    """Token and position embeddings, a pre-norm Transformer encoder, mean-pooled, linear."""

    def __init__(self, vocab: int = 256, length: int = 64, dim: int = 128, heads: int = 4,
                 layers: int = 2, classes: int = 10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(length, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        x = self.norm(self.encoder(x))
        return self.head(x.mean(dim=1))


def transformer(samples: int = 4096, length: int = 64, dim: int = 128, layers: int = 2,
                batch_size: int = 32, seed: int = 0) -> Workload:
    """The built-in Transformer workload (see the module docstring)."""
    return Workload(model=SmallTransformer(length=length, dim=dim, layers=layers),
                    dataset=SyntheticSequences(samples=samples, length=length, seed=seed), loss_fn=F.cross_entropy,
                    batch_size=batch_size, name="builtin:transformer", target_loss=1.0, lr=1e-3)


BUILTINS: dict = {"cnn": cnn, "images": images, "transformer": transformer}
