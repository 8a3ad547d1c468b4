"""What torch's own warnings and errors say about CUDA, as stable words.

The words come from a pasted collect_env report (the warnings above it, a traceback below it) or
from the deep probe.  The patterns live here, once: the collect_env reader extracts with them, the
machine view classifies with :func:`classify`.  Every pattern starts with a literal and bounds its
repeats, so a search stays linear on megabyte lines.
"""

from __future__ import annotations

import re
from typing import Optional

NO_DRIVER = re.compile(r"Found no NVIDIA driver on your system")
DRIVER_TOO_OLD = re.compile(r"The NVIDIA driver on your system is too old \(found version (\d{1,6})\)")
NO_KERNEL_IMAGE = re.compile(r"no kernel image is available for execution on the device")
CUDA_UNKNOWN = re.compile(r"CUDA unknown error - this may be due to an incorrectly set up environment")
DRIVER_INIT = re.compile(r"CUDA driver initialization failed")
# "Unexpected error from cudaGetDeviceCount(). ... Error 804: forward compatibility was
# attempted on non supported HW", "Error 803: system has unsupported display driver /
# cuda driver combination" (a container's libcuda newer than the host's kernel module).
DEVICE_COUNT = re.compile(r"Unexpected error from cudaGetDeviceCount\(\)[^\n]{0,300}?Error (\d{1,4}): ([^\n]{1,200})")
NO_GPUS = re.compile(r"No CUDA GPUs are available")

# (kind, pattern), the first that matches wins: a missing driver explains every later symptom.
KINDS = (
    ("no-driver", NO_DRIVER),
    ("driver-too-old", DRIVER_TOO_OLD),
    ("init-failed", CUDA_UNKNOWN),
    ("init-failed", DRIVER_INIT),
    ("init-failed", DEVICE_COUNT),
    ("init-failed", NO_GPUS),
    ("no-kernel-image", NO_KERNEL_IMAGE),
)


def classify(text: object) -> Optional[tuple[str, str]]:
    """(kind, the words matched) for the first of :data:`KINDS` found in ``text``:
    "no-driver", "driver-too-old", "init-failed", "no-kernel-image"; None when torch's
    words say none of these.  Never raises."""
    if not isinstance(text, str) or not text:
        return None
    for kind, pattern in KINDS:
        m = pattern.search(text)
        if m:
            return kind, m.group(0)
    return None
