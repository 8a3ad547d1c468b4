"""Workloads for benchmarks/gpu_check.sh (run from this folder: `gpu_workloads:hungry`)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

GiB = 1024 ** 3


class _Hungry(nn.Module):
    """Holds ``per_sample`` bytes of activations per sample for backward: a real CUDA out-of-memory
    at large micro-batches (3 GiB x 32, twice over while the copy is made), none at small ones."""

    def __init__(self, per_sample: int):
        super().__init__()
        self.lin = nn.Linear(8, 3)
        self.per_sample = per_sample

    def forward(self, x):
        n = self.per_sample // 4
        big = x[:, :1].expand(-1, n).contiguous() * 1.0001  # float32: per_sample bytes per row, kept for backward
        return self.lin(x) + big.mean(dim=1, keepdim=True)


def _points(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, (x @ torch.randn(8, 3, generator=g)).argmax(1))


def hungry(gib_per_sample: float = 3.0):
    return {"model": _Hungry(int(gib_per_sample * GiB)), "dataset": _points(), "loss_fn": F.cross_entropy,
            "batch_size": 32, "target_loss": 0.5}


class _Waits(nn.Module):
    """Two host waits per forward pass, on known lines, for verify-train's host-wait count."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x):
        scale = x.abs().max().item()         # host wait 1: .item()
        if x.sum() > 0:                      # host wait 2: a Python branch on a GPU tensor
            x = x / scale
        return self.lin(x)


def _logged_loss(out, target):
    loss = F.cross_entropy(out, target)
    print(f"loss {float(loss):.3f}")        # host wait 3: float() of a GPU tensor
    return loss


def waits():
    return {"model": _Waits(), "dataset": _points(), "loss_fn": _logged_loss, "batch_size": 32, "target_loss": 0.5}
