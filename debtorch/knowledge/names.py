"""How GPU names are compared: a name as nvidia-smi, NVML, collect_env or pci.ids print it, as
tokens ("NVIDIA GeForce RTX 4070 Laptop GPU" -> rtx, 4070, laptop, gpu)."""

from __future__ import annotations

import re
from typing import List

_GPU_DROP = {"nvidia", "geforce", "tesla", "corporation"}


def gpu_tokens(name: str) -> List[str]:
    text = str(name).lower()
    text = re.sub(r"\(\s*uuid[^)]*\)?", " ", text)          # nvidia-smi -L: (UUID: GPU-...)
    text = re.sub(r"\bgpu-[0-9a-f-]{8,}", " ", text)        # a bare UUID
    text = re.sub(r"^\s*gpu\s*\d+\s*:", " ", text)          # "GPU 0: ..."
    text = re.sub(r"[^a-z0-9]+", " ", text)
    text = re.sub(r"(?<=[a-z])(?=[0-9])|(?<=[0-9])(?=[a-z])", " ", text)
    return [t for t in text.split() if t not in _GPU_DROP]

