"""What the doctor knows, read from the data files in ``checks/``.

The tables (docs/knowledge.md: what each means, where the folder is found, why nothing is cached on
disk) are validated when a question first needs them, and answered as pure functions (what each
answers: the API table of docs/knowledge.md).  A lookup never raises on odd input: it answers
``None`` or an "unknown" verdict; only a malformed data file raises :class:`KnowledgeError`, whose
message is one line naming the file and the row.

Loading is one module, the questions one module a domain:

* ``tables.py``: where the folder is, each file's schema, reading and checking it (:func:`load`);
* ``cuda.py``: CUDA releases and the driver (minimum drivers, minor-version compatibility, what nvcc builds);
* ``wheels.py``: PyTorch's wheels (variants, files, pins, the variant for a driver and GPUs, architectures);
* ``archlists.py``: architecture lists and whether a build has code for a GPU (no table);
* ``gpus.py`` (with ``names.py``): GPUs by name and by PCI device id;
* ``debian.py``: Debian's releases, suites, architectures and packages;
* ``thresholds.py``: the limits checks compare against.

Callers ask here (``knowledge.wheel(...)``, ``knowledge.threshold(...)``).
"""

from debtorch.knowledge.archlists import arch_support, older_than_all, parse_arch_list
from debtorch.knowledge.cuda import (
    cuda_builds_sass,
    cuda_can_build,
    driver_cuda_supports,
    driver_supports,
    last_driver_branch,
    max_cuda_for_driver,
    min_driver,
    newest_driver_branch,
)
from debtorch.knowledge.debian import (
    SUITE_ALIASES,
    SUITE_PARTS,
    debian_arch,
    debian_codename_for,
    debian_has,
    debian_package,
    debian_release,
    debian_support,
    debian_version_for,
    is_debian_suite,
)
from debtorch.knowledge.gpus import (
    NVIDIA_PCI_VENDOR,
    capability_for_name,
    capability_for_pci_id,
    pci_device,
    pci_device_id,
)
from debtorch.knowledge.tables import (
    CONFIDENCE,
    ENV_DIR,
    SCHEMA,
    SYSTEM_DIR,
    Knowledge,
    KnowledgeError,
    Row,
    checks_dir,
    load,
)
from debtorch.knowledge.thresholds import threshold
from debtorch.knowledge.wheels import (
    PIP_INDEX,
    STATUS_RANK,
    best_variant_for_driver,
    files_glibc,
    glibc_fits,
    known_series,
    latest_series,
    pin,
    python_fits,
    releases,
    variants,
    wheel,
    wheel_files,
    wheel_machine,
    wheel_machines,
)

__all__ = [
    "arch_support", "older_than_all", "parse_arch_list",
    "cuda_builds_sass", "cuda_can_build", "driver_cuda_supports", "driver_supports", "last_driver_branch",
    "max_cuda_for_driver", "min_driver", "newest_driver_branch",
    "SUITE_ALIASES", "SUITE_PARTS", "debian_arch", "debian_codename_for", "debian_has", "debian_package",
    "debian_release", "debian_support", "debian_version_for", "is_debian_suite",
    "NVIDIA_PCI_VENDOR", "capability_for_name", "capability_for_pci_id", "pci_device", "pci_device_id",
    "CONFIDENCE", "ENV_DIR", "SCHEMA", "SYSTEM_DIR", "Knowledge", "KnowledgeError", "Row", "checks_dir", "load",
    "threshold",
    "PIP_INDEX", "STATUS_RANK", "best_variant_for_driver", "files_glibc", "glibc_fits", "known_series",
    "latest_series", "pin", "python_fits", "releases", "variants", "wheel", "wheel_files", "wheel_machine",
    "wheel_machines",
]
