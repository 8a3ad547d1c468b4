"""The network in the machine view (:class:`Network`): the interfaces of /sys/class/net, what
``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` select among them, the InfiniBand ports, and
MASTER_ADDR as the resolver answers it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from debtorch.facts import unknown_reason
from debtorch.machine.read import as_dict, as_float, as_int, as_list, as_str, section


@dataclass(frozen=True)
class Interface:
    """A network interface of /sys/class/net."""

    name: str
    up: bool                             # administratively up (IFF_UP) and operational
    operstate: Optional[str] = None
    mtu: Optional[int] = None
    speed_mbps: Optional[int] = None
    link_type: Optional[str] = None      # ether, infiniband, loopback, ...
    virtual: bool = False
    addresses: Optional[tuple[str, ...]] = None    # None: unknown

    @property
    def loopback(self) -> bool:
        return self.link_type == "loopback" or self.name == "lo"


@dataclass(frozen=True)
class IfnameChoice:
    """What ``NCCL_SOCKET_IFNAME`` or ``GLOO_SOCKET_IFNAME`` selects on this machine."""

    variable: str
    value: str
    selected: tuple[str, ...]            # names of the interfaces it matches
    usable: tuple[str, ...]              # those up (and with an address, where addresses are known)

    @property
    def ok(self) -> bool:
        return bool(self.usable)

    @property
    def loopback_only(self) -> bool:
        return bool(self.usable) and all(n == "lo" for n in self.usable)


@dataclass(frozen=True)
class IBPort:
    """An InfiniBand or RoCE port of /sys/class/infiniband."""

    device: str
    port: Optional[int]
    state: Optional[str]                 # ACTIVE, INIT, ARMED, DOWN
    phys_state: Optional[str]            # LinkUp, Polling, Disabled, ...
    rate: Optional[str]                  # '200 Gb/sec (4X HDR)'
    rate_gbps: Optional[float]
    link_layer: Optional[str]            # InfiniBand, or Ethernet for RoCE
    netdevs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.device} port {self.port}"

    @property
    def active(self) -> bool:
        return (self.state or "").upper() == "ACTIVE"


@dataclass(frozen=True)
class Network:
    interfaces: Optional[tuple[Interface, ...]]   # None: /sys/class/net could not be read
    unknown: Optional[str]
    ib_ports: tuple[IBPort, ...]
    ofed: Optional[str]
    choices: tuple[IfnameChoice, ...]    # per IFNAME variable that is set
    master_addr: Optional[str] = None
    master_addresses: Optional[tuple[str, ...]] = None
    master_error: Optional[str] = None   # why MASTER_ADDR does not resolve

    @property
    def traffic_interfaces(self) -> tuple[Interface, ...]:
        """The interfaces the collective libraries' sockets use here: those the IFNAME variables
        select, else every usable interface that is neither loopback nor a container bridge
        (NCCL's default skips ``docker*`` and ``lo``)."""
        if self.interfaces is None:
            return ()
        names: list[str] = []
        for c in self.choices:
            names.extend(n for n in c.usable if n not in names)
        if not self.choices:
            names = [i.name for i in self.interfaces if _usable(i) and not i.loopback
                     and not i.name.startswith(("docker", "virbr", "veth", "br-"))]
        return tuple(i for i in self.interfaces if i.name in names)


def _interface(r: dict) -> Interface:
    """A row of network.interfaces, read."""
    flags = as_int(r.get("flags"))
    state = (as_str(r.get("operstate")) or "").lower()
    admin = True if flags is None else bool(flags & 0x1)     # IFF_UP
    # "unknown" is what lo, tun and some drivers report while up: trust the carrier.
    oper = state == "up" or (state in ("unknown", "") and r.get("carrier") is not False)
    addrs = r.get("addresses")
    addresses = None
    if isinstance(addrs, list):
        addresses = tuple(a for a in addrs if isinstance(a, str))
    return Interface(name=r["name"].strip(), up=admin and oper, operstate=state or None, mtu=as_int(r.get("mtu")),
                     speed_mbps=as_int(r.get("speed_mbps")), link_type=as_str(r.get("link_type")),
                     virtual=bool(r.get("virtual")), addresses=addresses)


def _usable(i: Interface) -> bool:
    return i.up and (i.addresses is None or bool(i.addresses))


def select_interfaces(variable: str, value: str, interfaces: Sequence[Interface]) -> tuple[str, ...]:
    """The interface names ``value`` selects, as NCCL reads NCCL_SOCKET_IFNAME (prefixes;
    ``=`` exact names; ``^`` excludes; https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname)
    or as Gloo reads GLOO_SOCKET_IFNAME (exact names, comma-separated;
    https://pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use)."""
    names = [i.name for i in interfaces]
    text = value.strip()
    if variable.startswith("GLOO"):
        wanted = [w.strip() for w in text.split(",") if w.strip()]
        return tuple(n for n in names if n in wanted)
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    words = [w.strip() for w in text.split(",") if w.strip()]

    def match(n: str) -> bool:
        return any(n == w if exact else n.startswith(w) for w in words)

    return tuple(n for n in names if match(n) != exclude)


def read_network(facts: dict) -> Network:
    """The interfaces (None, with the reason, when /sys/class/net could not be read), the InfiniBand
    ports, what each IFNAME variable that is set selects, and MASTER_ADDR."""
    n = section(facts, "network")
    rows = n.get("interfaces")
    ifaces = None
    unknown = None
    if isinstance(rows, list):
        ifaces = tuple(_interface(r) for r in rows if isinstance(r, dict) and as_str(r.get("name")))
    else:
        unknown = unknown_reason(facts, "network.interfaces") or "not in the facts"
    ports = tuple(_ib_port(p) for p in as_list(n.get("infiniband")) if isinstance(p, dict) and as_str(p.get("device")))
    env = section(facts, "env.variables")
    choices = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = env.get(var)
        if isinstance(value, str) and value.strip() and ifaces is not None:
            picked = select_interfaces(var, value, ifaces)
            usable = tuple(i.name for i in ifaces if i.name in picked and _usable(i))
            choices.append(IfnameChoice(var, value.strip(), picked, usable))
    master = as_dict(n.get("master_addr"))
    addrs = master.get("addresses")
    return Network(interfaces=ifaces, unknown=unknown, ib_ports=ports, ofed=as_str(n.get("ofed_version")),
                   choices=tuple(choices), master_addr=as_str(master.get("name")),
                   master_addresses=tuple(addrs) if isinstance(addrs, list) else None,
                   master_error=as_str(master.get("error")))


def _ib_port(p: dict) -> IBPort:
    """A row of network.infiniband, read."""
    return IBPort(device=p["device"], port=as_int(p.get("port")), state=as_str(p.get("state")),
                  phys_state=as_str(p.get("phys_state")), rate=as_str(p.get("rate")),
                  rate_gbps=as_float(p.get("rate_gbps")), link_layer=as_str(p.get("link_layer")),
                  netdevs=tuple(x for x in as_list(p.get("netdevs")) if isinstance(x, str)))
