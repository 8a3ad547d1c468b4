"""Small, fast workloads for the engine's tests."""
import os
import signal
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Points(torch.utils.data.Dataset):
    """Points in 8 dimensions labelled by a fixed linear teacher; optional delay per item."""

    def __init__(self, n=256, delay=0.0, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x @ torch.randn(8, 3, generator=g)).argmax(1)
        self.delay = delay

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]


def make(delay=0.0, n=256, batch_size=16):
    return {"model": nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)),
            "dataset": Points(n, delay), "loss_fn": F.cross_entropy, "batch_size": batch_size,
            "target_loss": 0.5}


def wrong():
    return [1, 2, 3]


def missing():
    return {"model": nn.Linear(8, 3), "batch_size": 4}


class _Oom(nn.Linear):
    def __init__(self):
        super().__init__(8, 3)

    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")


def oom():
    return {"model": _Oom(), "dataset": Points(64), "loss_fn": F.cross_entropy, "batch_size": 32}


class _BusError(Points):
    def __getitem__(self, i):
        os.kill(os.getpid(), signal.SIGBUS)  # what a DataLoader worker gets when /dev/shm is full
        return super().__getitem__(i)


def bus_error():
    return {"model": nn.Linear(8, 3), "dataset": _BusError(64), "loss_fn": F.cross_entropy, "batch_size": 8}


class _Stuck(Points):
    def __getitem__(self, i):
        time.sleep(3600)


def stuck():
    return {"model": nn.Linear(8, 3), "dataset": _Stuck(64), "loss_fn": F.cross_entropy, "batch_size": 8}


def littering():
    """Leaves a folder in the temporary directory, as a killed DataLoader's multiprocessing does."""
    import tempfile

    tempfile.mkdtemp(prefix="pymp-left-")
    return stuck()


def hang_in_load():
    """A workload function that never returns (a dataset download stuck on a dead mount)."""
    time.sleep(3600)


class _HangsAfter(nn.Linear):
    """Hangs in its ``after``-th forward pass in this process (a deadlock in a step)."""

    calls = 0

    def __init__(self, after):
        super().__init__(8, 3)
        self.after = after

    def forward(self, x):
        _HangsAfter.calls += 1
        if _HangsAfter.calls >= self.after:
            time.sleep(3600)
        return super().forward(x)


def hang_in_step(after=1):
    return {"model": _HangsAfter(after), "dataset": Points(64), "loss_fn": F.cross_entropy, "batch_size": 8}


def hang_later():
    """Trains for a while (calibration and the first trials of a search), then hangs in a step."""
    return hang_in_step(after=150)


# Models for tests/test_engine.py


class Transient(nn.Linear):
    """Allocates (and frees) 256 MiB inside every forward pass."""

    def __init__(self):
        super().__init__(8, 3)

    def forward(self, x):
        big = torch.ones(64 * 2**20)
        return super().forward(x) + big[0] - 1


class SlowFirstStep(nn.Linear):
    """A model whose first forward pass takes 0.5 s (torch's own first steps are slow too):
    meanwhile the DataLoader's workers fill their whole prefetch queue."""

    def __init__(self):
        super().__init__(8, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.5)
        return super().forward(x)
