"""Checks: the network a multi-node job uses (interfaces the IFNAME variables select,
InfiniBand/RoCE ports, MASTER_ADDR).  All read the machine view's ``network``."""

from __future__ import annotations

from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine


def _candidates(m: Machine) -> str:
    """The interfaces a user could name instead: up, not loopback."""
    names = [i.name for i in m.network.interfaces or () if i.up and not i.loopback]
    return ", ".join(names) or "none is up"


@check("network")
def check_ifname(m: Machine, ctx: Context) -> list[Finding]:
    """network.E001/E002: NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names nothing usable here."""
    out = []
    for c in m.network.choices:
        facts = {f"env.{c.variable}": c.value, "selected": list(c.selected), "usable": list(c.usable)}
        if not c.selected:
            out.append(finding("network.E001", variable=c.variable, value=c.value, candidates=_candidates(m),
                               about=c.variable, facts=facts))
        elif not c.usable:
            down = ", ".join(c.selected)
            out.append(finding("network.E002", variable=c.variable, value=c.value, down=down,
                               candidates=_candidates(m), about=c.variable, facts=facts))
    return out


def _multi_node(m: Machine) -> bool:
    env = m.get("env.variables") or {}
    if (m.slurm.nnodes or 0) > 1:
        return True
    world, local = str(env.get("WORLD_SIZE") or ""), str(env.get("LOCAL_WORLD_SIZE") or "")
    return world.isdigit() and local.isdigit() and int(world) > int(local)


@check("network")
def check_loopback_only(m: Machine, ctx: Context) -> list[Finding]:
    """network.W002: in a multi-node job, sockets restricted to the loopback interface."""
    if not _multi_node(m):
        return []
    return [finding("network.W002", variable=c.variable, value=c.value, candidates=_candidates(m),
                    about=c.variable, facts={f"env.{c.variable}": c.value, "usable": list(c.usable)})
            for c in m.network.choices if c.loopback_only]


@check("network")
def check_master_addr(m: Machine, ctx: Context) -> list[Finding]:
    """network.E003: MASTER_ADDR does not resolve on this machine."""
    n = m.network
    if not n.master_addr or n.master_addresses is not None or not n.master_error:
        return []
    return [finding("network.E003", name=n.master_addr, error=n.master_error, about="MASTER_ADDR",
                    facts={"network.master_addr.name": n.master_addr, "network.master_addr.error": n.master_error})]


@check("network")
def check_ib_ports(m: Machine, ctx: Context) -> list[Finding]:
    """network.W001 (a linked port that is not ACTIVE) and network.I001 (a port that is down)."""
    out = []
    for p in m.network.ib_ports:
        if p.active or not p.state:
            continue
        facts = {"state": p.state, "phys_state": p.phys_state, "link_layer": p.link_layer, "rate": p.rate}
        if (p.phys_state or "").lower() == "linkup":
            # INIT or ARMED with the link up: the subnet manager has not (yet) configured the port.
            roce = (p.link_layer or "InfiniBand") != "InfiniBand"
            out.append(finding("network.W001", variant="roce" if roce else "", port=p.label, state=p.state,
                               about=p.label, facts=facts))
        else:
            out.append(finding("network.I001", port=p.label, state=p.state,
                               phys_state=p.phys_state or "physical state unknown", about=p.label, facts=facts))
    return out
