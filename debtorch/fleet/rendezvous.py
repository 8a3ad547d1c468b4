"""Where the ranks of a gathered ``debtorch fleet`` meet, read from the launcher's variables (torchrun's,
srun's, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set by hand; docs/fleet.md, "Launch lines").
:func:`from_environ` is a pure function of a mapping, bad values one line; :func:`listen_address` says
where rank 0's store listens (the address MASTER_ADDR names, every interface only when it must);
:func:`load_secret` reads the shared secret that signs what the ranks send (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from debtorch import hostlist, inputs
from debtorch.host import FLEET_SECRET

DEFAULT_PORT = 29500
SLURM_PORT_BASE = 20000
MAX_WORLD = 65536             # ranks: what rank 0 waits for, names and compares is bounded
SECRET_BYTES = (16, 4096)     # a shared secret: at least 16 characters, a file at most 4 KiB

# What debtorch fleet reads to meet the other ranks (the man page's ENVIRONMENT section).
ENVIRONMENT = [
    ("RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
     "Set by torchrun (or by hand): debtorch fleet gathers the nodes' documents to rank 0 at MASTER_ADDR:MASTER_PORT."),
    ("SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST",
     "Set by srun: rank 0 is the first node of the list; MASTER_PORT defaults to 20000 + the job id modulo 20000."),
]


class RendezvousError(Exception):
    """The variables do not describe a rendezvous; ``str()`` is one line for the user."""


@dataclass(frozen=True)
class Rendezvous:
    rank: int
    world: int
    addr: str
    port: int
    launcher: str                 # "torchrun", "slurm" or "env"
    agent_store: bool             # a torchrun agent hosts the store: every rank is a client
    prefix: str                   # this run's keys in the store
    node_names: tuple = ()        # rank -> node, when the launcher says (srun, one task per node)
    local: bool = False           # every rank is on this node (one Slurm node, MASTER_ADDR a loopback)

    def name_of(self, rank: int) -> str:
        return hostlist.safe(self.node_names[rank]) if 0 <= rank < len(self.node_names) else f"rank {rank}"


def _int(env: Mapping, name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or str(value).strip() == "":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise RendezvousError(f"{name}={value!r} is not a number") from None


def _port(env: Mapping, default: int) -> int:
    port = _int(env, "MASTER_PORT")
    port = default if port is None else port
    if not 0 < port < 65536:
        raise RendezvousError(f"MASTER_PORT={port} is not a TCP port (1-65535)")
    return port


def _check(rank: int, world: int, rank_var: str, world_var: str) -> None:
    if not 1 <= world <= MAX_WORLD:
        raise RendezvousError(f"{world_var}={world}: debtorch fleet takes 1 to {MAX_WORLD} processes")
    if not 0 <= rank < world:
        raise RendezvousError(f"{rank_var}={rank} is outside 0..{world - 1} ({world_var}={world})")


def from_environ(env: Mapping) -> Optional[Rendezvous]:
    """The rendezvous the launcher describes, or None when no launcher variables are set."""
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    if rank is not None or world is not None:
        if rank is None or world is None:
            raise RendezvousError("RANK and WORLD_SIZE must be set together (torchrun sets both)")
        _check(rank, world, "RANK", "WORLD_SIZE")
        addr = str(env.get("MASTER_ADDR") or "").strip()
        if not addr:
            raise RendezvousError("RANK and WORLD_SIZE are set but MASTER_ADDR is not")
        run = str(env.get("TORCHELASTIC_RUN_ID") or "").strip()
        restart = str(env.get("TORCHELASTIC_RESTART_COUNT") or "0").strip()
        agent = str(env.get("TORCHELASTIC_USE_AGENT_STORE") or "").strip().lower() == "true"
        return Rendezvous(rank, world, addr, _port(env, DEFAULT_PORT), "torchrun" if run else "env", agent,
                          f"debtorch-fleet/{run or 'env'}/{restart}/", local=_loopback(addr))
    procid, ntasks = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
    if procid is None and ntasks is None:
        return None
    if procid is None or ntasks is None:
        raise RendezvousError("SLURM_PROCID and SLURM_NTASKS must both be set: start debtorch fleet with srun")
    _check(procid, ntasks, "SLURM_PROCID", "SLURM_NTASKS")
    nodelist = next((str(env[v]) for v in ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
                     if str(env.get(v) or "").strip()), "")
    nodes = hostlist.expand(nodelist)
    addr = str(env.get("MASTER_ADDR") or "").strip() or (nodes[0] if nodes else "")
    if not addr:
        raise RendezvousError("no SLURM_NODELIST to find rank 0's node: set MASTER_ADDR")
    job = _int(env, "SLURM_JOB_ID") or _int(env, "SLURM_JOBID")
    step = str(env.get("SLURM_STEP_ID") or "0").strip()
    port = _port(env, SLURM_PORT_BASE + job % 20000 if job is not None else DEFAULT_PORT)
    # With one task per node, task i runs on the i-th node of the list (block distribution).
    names = tuple(nodes) if len(nodes) == ntasks else ()
    return Rendezvous(procid, ntasks, addr, port, "slurm", False, f"debtorch-fleet/{job or 'job'}.{step}/", names,
                      local=_loopback(addr) or len(set(nodes)) == 1)


def _loopback(addr: str) -> bool:
    try:
        return addr == "localhost" or ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _unspecified(addr: str) -> bool:
    """0.0.0.0 or ::, which a socket bound to listens on every interface."""
    try:
        return ipaddress.ip_address(addr).is_unspecified
    except ValueError:
        return False


def listen_address(rdzv: Rendezvous, resolve: Callable[[str], list]) -> tuple:
    """(address, note): where rank 0's store listens.  The address MASTER_ADDR resolves to here;
    every interface ("") only when a name resolves to loopback here in a job that spans nodes
    (Debian maps a host's own name to 127.0.1.1: the other nodes reach it by another address)."""
    try:
        addrs = [a for a in resolve(rdzv.addr) if a]
    except Exception:  # noqa: BLE001 - the store then says it cannot listen there, in one line
        return rdzv.addr, ""
    if addrs and _unspecified(addrs[0]):
        return addrs[0], (f"MASTER_ADDR={rdzv.addr} is every address: the store listens on every interface, "
                          "where any host that reaches this node can write into it (set MASTER_ADDR to this "
                          "node's address on the job's network; docs/security.md)")
    if not addrs or not _loopback(addrs[0]) or rdzv.local:
        return (addrs[0] if addrs else rdzv.addr), ""
    return "", (f"MASTER_ADDR={rdzv.addr} is {addrs[0]} on this node: the store listens on every interface "
                "(set MASTER_ADDR to this node's address on the job's network to listen there only)")


def load_secret(environ: Mapping, path: Optional[str]) -> Optional[bytes]:
    """The fleet's shared secret: ``--secret-file PATH`` (a regular file of this user that nobody
    else may read, as ssh asks of a key) or $DEBTORCH_FLEET_SECRET; None when neither is given."""
    where = f"--secret-file {path}" if path else FLEET_SECRET
    if not path and FLEET_SECRET in environ and not str(environ[FLEET_SECRET]).strip():
        # Set but blank ($(cat a-missing-file), a quoting slip): never run unsigned without a word.
        raise RendezvousError(f"{FLEET_SECRET} is set but blank: give the secret, or unset it to run unsigned")
    try:
        text = (inputs.read_bytes(path, SECRET_BYTES[1], owner_only=True) if path
                else os.fsencode(str(environ.get(FLEET_SECRET) or ""))).strip()
    except inputs.InputError as exc:
        raise RendezvousError(f"--secret-file {exc}") from None
    except OSError as exc:
        raise RendezvousError(f"--secret-file {path}: cannot read ({exc.strerror or exc})") from None
    if not (text or path):
        return None
    if not SECRET_BYTES[0] <= len(text) <= SECRET_BYTES[1]:
        raise RendezvousError(f"{where}: a secret of {SECRET_BYTES[0]} to {SECRET_BYTES[1]} characters is needed "
                              f"(got {len(text)})")
    return text
