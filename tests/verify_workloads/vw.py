"""Small workloads that fail the way real runs do, for verify-train's tests."""
import os
import signal
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Points(torch.utils.data.Dataset):
    """Points in 8 dimensions labelled by a fixed linear teacher."""

    def __init__(self, n=128, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x @ torch.randn(8, 3, generator=g)).argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class _Hungry(nn.Linear):
    """Raises PyTorch's own out-of-memory error for micro-batches above ``limit``."""

    def __init__(self, limit):
        super().__init__(8, 3)
        self.limit = limit

    def forward(self, x):
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (simulated: limit {self.limit})")
        return super().forward(x)


def oom_above(limit=4):
    return {"model": _Hungry(limit), "dataset": Points(), "loss_fn": F.cross_entropy, "batch_size": 16,
            "target_loss": 0.5}


class _ShmFull(Points):
    """Dies of SIGBUS in a DataLoader worker, as a worker does when /dev/shm is full."""

    def __getitem__(self, i):
        if torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGBUS)
        return super().__getitem__(i)


def shm_full():
    return {"model": nn.Linear(8, 3), "dataset": _ShmFull(), "loss_fn": F.cross_entropy, "batch_size": 8,
            "target_loss": 0.5}


class _Diverging(nn.Linear):
    """A model whose output is NaN from the first step: the loss is never finite."""

    def forward(self, x):
        return super().forward(x) * float("nan")


def nan_loss():
    return {"model": _Diverging(8, 3), "dataset": Points(), "loss_fn": F.cross_entropy, "batch_size": 8,
            "target_loss": 0.5}


def exit_while_loading():
    """Leaves the worker with os._exit while it loads the workload (a C extension aborting)."""
    os._exit(3)


class SlowPoints(Points):
    """Points that take 10 ms each to load: a round lasts seconds, so a test that acts on a progress
    line still finds the run in that round on a busy machine."""

    def __getitem__(self, i):
        time.sleep(0.01)
        return super().__getitem__(i)


def slow_points():
    """:func:`points` on :class:`SlowPoints`."""
    return dict(points(), dataset=SlowPoints())


def points():
    """A user's module:function that trains nothing unusual (for the simulated accelerator)."""
    return {"model": nn.Linear(8, 3), "dataset": Points(), "loss_fn": F.cross_entropy, "batch_size": 8,
            "target_loss": 0.5}
