"""The machine view: one typed reading of a facts document.

Every question about the facts that needs interpretation is answered here, once, and every
command reads the answer from here (docs/architecture.md): the driver and where its version came
from, the GPUs with their compute capability and those CUDA will use, usable CPUs, /dev/shm
against the planned DataLoader workers, the Debian release, the installed PyTorch (its build, its
arch list, whether CUDA works for it, the cuDNN and NCCL it loads), the network and the Slurm job.

``Machine.from_facts(doc)`` never raises on a well-formed document (what
:func:`debtorch.facts.load` or :func:`debtorch.facts.collect` returns): an
answer that cannot be given is None, with a reason where the facts give one.

:class:`Machine` (``view.py``) holds one frozen value a section, each read by its module:
``nvidia.py`` (``m.driver``, ``m.gpus``), ``cpu.py`` (``m.cpus``, ``m.shm``), ``system.py``
(``m.os``, ``m.apt``, ``m.debian_driver``), ``pytorch.py`` (``m.torch``, ``m.torch_arch``,
``m.cuda``, ``m.cudnn``, ``m.nccl``, the wheels that install here), ``network.py``
(``m.network``), ``slurm.py`` (``m.slurm``); ``read.py`` reads a document's values.  A new
answer goes into the section module it belongs to, with its property on :class:`Machine`.
"""

from debtorch.machine.cpu import CPUs, Shm
from debtorch.machine.network import IBPort, IfnameChoice, Interface, Network, select_interfaces
from debtorch.machine.nvidia import GPU, Driver, GPUs, oldest_cc, visible_devices
from debtorch.machine.pytorch import ArchList, CudaState, Torch, Version
from debtorch.machine.slurm import Slurm
from debtorch.machine.system import OS, Apt, DebianRelease
from debtorch.machine.view import Machine

__all__ = ["Machine", "CPUs", "Shm", "IBPort", "IfnameChoice", "Interface", "Network", "select_interfaces",
           "GPU", "GPUs", "Driver", "oldest_cc", "visible_devices", "ArchList", "CudaState", "Torch", "Version",
           "Slurm", "OS", "Apt", "DebianRelease"]
