"""Train a small CNN with the settings `debtorch tune --write` chose.

    debtorch tune --write debtorch.toml --steps 200      # once per machine
    python train_with_debtorch.py --config debtorch.toml --steps 200
    torchrun --standalone --nproc_per_node=N train_with_debtorch.py ...  # DDP

Every line that uses the config is marked `# debtorch`; `cfg.watch` prints
the data wait and host syncs of the loop, and its verdict, on stderr.  The data are
synthetic images labelled by a fixed random "teacher", so the loss falls and
the script needs nothing but torch; swap in your own dataset and model.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import debtorch


class SyntheticImages(Dataset):
    """Images decoded from a latent code, with a little per-sample CPU work (like decoding)."""

    def __init__(self, n=2048, size=32, classes=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.latent = torch.randn(n, 16, generator=g)
        self.basis = torch.randn(16, 3 * 4 * 4, generator=g) / 2   # a coarse 4x4 pattern per image
        self.labels = (self.latent @ torch.randn(16, classes, generator=g)).argmax(1)
        self.size = size

    def __len__(self):
        return len(self.latent)

    def __getitem__(self, i):
        coarse = torch.tanh(self.latent[i] @ self.basis).view(1, 3, 4, 4)
        img = F.interpolate(coarse, size=self.size, mode="bilinear", align_corners=False)[0]
        if i % 2:  # "augmentation": a horizontal flip
            img = img.flip(-1)
        return img, self.labels[i]


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.fc = nn.Linear(32 * 4 * 4, classes)

    def forward(self, x):
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 4).flatten(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="debtorch.toml")
    ap.add_argument("--steps", type=int, default=50, help="optimizer steps")
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    cfg = debtorch.load(args.config)                                        # debtorch
    cfg.configure_torch()                                                   # debtorch: TF32, cuDNN, threads

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        backend = cfg.settings.backend or ("nccl" if torch.cuda.is_available() else "gloo")  # debtorch
        torch.distributed.init_process_group(backend)
    if cfg.device == "cuda" and torch.cuda.is_available():                  # debtorch
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    ds = SyntheticImages()
    sampler = torch.utils.data.DistributedSampler(ds) if world > 1 else None
    loader = DataLoader(ds, sampler=sampler, shuffle=sampler is None,
                        **cfg.loader_kwargs(batch_size=32, drop_last=True))  # debtorch
    loader = cfg.watch(loader)                                              # debtorch: data wait, syncs, a verdict

    model = cfg.prepare_model(SmallCNN().to(device))                        # debtorch: channels_last, compile
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, **cfg.optimizer_kwargs())  # debtorch: fused
    sched = cfg.scheduler(opt, total_steps=args.steps)                      # debtorch: OneCycleLR
    scaler = cfg.scaler(device)                                             # debtorch: no-op unless fp16
    accum = cfg.accumulation_steps                                          # debtorch

    step, micro, losses, samples = 0, 0, [], 0
    start = time.perf_counter()
    epoch = 0
    while step < args.steps:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = cfg.to_device(x, device), cfg.to_device(y, device)      # debtorch: non_blocking, NHWC
            micro += 1
            steps_now = micro % accum == 0
            # DDP all-reduces the gradients once per optimizer step, not once per micro-batch
            sync = model.no_sync() if world > 1 and not steps_now else contextlib.nullcontext()
            with sync:
                with cfg.autocast(device):                                  # debtorch: bf16 / fp16 / fp32
                    loss = F.cross_entropy(model(x), y) / accum
                scaler.scale(loss).backward()
            samples += len(y)
            if not steps_now:
                continue
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            sched.step()
            losses.append(loss.detach() * accum)                           # on the device: read at the end
            step += 1
            if step >= args.steps:
                break
        epoch += 1
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"trained {step} steps ({cfg.settings.short()}): loss {losses[0].item():.3f} -> {losses[-1].item():.3f}, "
              f"{samples * world / seconds:.1f} samples/s")
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
