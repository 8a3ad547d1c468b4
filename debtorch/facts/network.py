"""Network facts: interfaces (``/sys/class/net``, ``ip -j addr show``), InfiniBand/RoCE ports,
OFED, whether MASTER_ADDR resolves (docs/facts.md).  Which interfaces ``NCCL_SOCKET_IFNAME``
selects, and whether they are up, is the machine view's reading (``Machine.network``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from debtorch.facts import Context, Section
from debtorch.host import NOT_RECORDED, Host, Unavailable, allowed_environ

NET = "/sys/class/net"
IB = "/sys/class/infiniband"

# ARPHRD_* numbers of /sys/class/net/<if>/type (include/uapi/linux/if_arp.h).
LINK_TYPES = {1: "ether", 32: "infiniband", 772: "loopback", 776: "sit", 65534: "none"}


def _int(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_ip_addr_json(text: str) -> dict:
    """``ip -j addr show`` -> {ifname: ["10.0.0.5/24", "fe80::1/64", ...]}.  Never raises."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return {}
    out: dict = {}
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("ifname"), str):
            continue
        addrs = []
        for a in entry.get("addr_info") or []:
            if isinstance(a, dict) and isinstance(a.get("local"), str):
                plen = a.get("prefixlen")
                addrs.append(f"{a['local']}/{plen}" if isinstance(plen, int) and not isinstance(plen, bool) else a["local"])
        out[entry["ifname"]] = addrs
    return out


def parse_ib_state(text: Optional[str]) -> Optional[str]:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'; None for nothing ('', '4:').  Never raises."""
    if not text:
        return None
    state = text.strip().split(":", 1)[-1].strip()
    if not state:
        return None
    return state


def parse_ib_rate(text: Optional[str]) -> Optional[float]:
    """'200 Gb/sec (4X HDR)' -> 200.0; '2.5 Gb/sec (1X SDR)' -> 2.5.  Never raises."""
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", str(text or ""))
    return float(m.group(1)) if m else None


def parse_ofed_info(text: str) -> Optional[str]:
    """``ofed_info -s`` ('MLNX_OFED_LINUX-23.10-0.5.5.0:', 'OFED-internal-24.07-0.6.1:') -> the version.
    Never raises."""
    for line in str(text).splitlines():
        m = re.match(r"\s*([A-Za-z_]*OFED[A-Za-z_-]*?)-(\d[\w.\-]*?):?\s*$", line)
        if m:
            return m.group(2)
    return None


def _read(host: Host, path: str) -> Optional[str]:
    text = host.try_read(path, max_bytes=4096)
    return text.strip() if text is not None else None


def interfaces(host: Host) -> tuple[Optional[list], Optional[str]]:
    """([interface, ...], None) or (None, why)."""
    try:
        names = host.listdir(NET)
    except Unavailable as exc:
        return None, f"{NET}: {exc.reason}"
    out = []
    for name in names:
        base = f"{NET}/{name}"
        speed = _int(_read(host, f"{base}/speed"))
        kind = _int(_read(host, f"{base}/type"))
        carrier = _read(host, f"{base}/carrier")
        out.append({
            "name": name,
            "operstate": _read(host, f"{base}/operstate"),
            "flags": _int(_read(host, f"{base}/flags")),     # IFF_UP is 0x1
            "carrier": None if carrier is None else carrier == "1",
            # -1 (or an error) when the link is down or the driver does not say (virtio, lo).
            "speed_mbps": speed if speed is not None and speed > 0 else None,
            "mtu": _int(_read(host, f"{base}/mtu")),
            "mac": _read(host, f"{base}/address"),
            "link_type": None if kind is None else LINK_TYPES.get(kind, str(kind)),
            # A physical (or SR-IOV) device has a device link; bridges, veth, tunnels do not.
            "virtual": not host.exists(f"{base}/device"),
        })
    return out, None


def infiniband(host: Host) -> tuple[list, Optional[str]]:
    """Every port of every InfiniBand/RoCE device ([] without /sys/class/infiniband)."""
    if not host.is_dir(IB):
        return [], None
    try:
        devices = host.listdir(IB)
    except Unavailable as exc:
        return [], f"{IB}: {exc.reason}"
    ports = []
    for dev in devices:
        base = f"{IB}/{dev}"
        netdevs = host.try_listdir(f"{base}/device/net")
        for num in host.try_listdir(f"{base}/ports"):
            p = f"{base}/ports/{num}"
            rate = _read(host, f"{p}/rate")
            ports.append({
                "device": dev,
                "port": _int(num),
                "hca_type": _read(host, f"{base}/hca_type"),
                "fw_ver": _read(host, f"{base}/fw_ver"),
                "state": parse_ib_state(_read(host, f"{p}/state")),
                "phys_state": parse_ib_state(_read(host, f"{p}/phys_state")),
                "rate": rate,
                "rate_gbps": parse_ib_rate(rate),
                "link_layer": _read(host, f"{p}/link_layer"),
                "netdevs": netdevs,
            })
    return ports, None


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    ifaces, why = interfaces(host)
    if ifaces is None:
        sec.unknown("interfaces", why or "unknown")
    else:
        res = host.run(["ip", "-j", "addr", "show"], timeout=5.0)
        addrs = parse_ip_addr_json(res.stdout) if res.ok else {}
        for i in ifaces:
            i["addresses"] = addrs.get(i["name"]) if res.ok else None
        if not res.ok:
            sec.setdefault("unknown", {})["interfaces.addresses"] = f"ip -j addr show: {res.reason}"
        sec["interfaces"] = ifaces

    ports, why = infiniband(host)
    sec["infiniband"] = ports
    if why:
        sec.setdefault("unknown", {})["infiniband"] = why

    res = host.run(["ofed_info", "-s"], timeout=5.0)
    version = parse_ofed_info(res.stdout) if res.ok else None
    sec.set_or_unknown("ofed_version", version,
                       f"ofed_info -s: {res.reason}" if not res.ok else "ofed_info printed no version")

    env = allowed_environ(host.environ)
    name = (env.get("MASTER_ADDR") or "").strip()
    if not name:
        sec.unknown("master_addr", "MASTER_ADDR is not set")
    else:
        entry: dict[str, Any] = {"name": name}
        try:
            entry["addresses"] = host.resolve(name)
        except Unavailable as exc:
            if exc.reason == NOT_RECORDED:
                # A replayed machine whose recording never asked: unknown, not a failure.
                sec.unknown("master_addr", f"resolving {name}: {exc.reason}")
                return sec
            entry["addresses"] = None
            entry["error"] = exc.reason
        sec["master_addr"] = entry
    return sec
