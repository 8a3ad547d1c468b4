"""Storage facts: NVMe controllers from sysfs (model, firmware, PCIe link) and,
for ``--data PATH``, the filesystem and disk behind the training data."""

from __future__ import annotations

import posixpath
import re
from typing import Optional

from debtorch.facts import Context, Section
from debtorch.host import Host, Unavailable

NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "fuse.glusterfs", "lustre", "gpfs",
    "fuse.sshfs", "sshfs", "9p", "afs", "beegfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs",
    "fuse.mountpoint-s3", "ocfs2", "gfs2", "virtiofs",
}


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[dict]:
    """/proc/self/mountinfo -> [{mount_point, fstype, source, options, devno, root}].  Never raises."""
    mounts = []
    for line in str(text).splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 6 or len(fields) < sep + 3:
            continue
        mounts.append(
            {
                "devno": fields[2],
                "root": _unescape(fields[3]),
                "mount_point": _unescape(fields[4]),
                "options": fields[5].split(","),
                "fstype": fields[sep + 1],
                "source": _unescape(fields[sep + 2]),
                "super_options": fields[sep + 3].split(",") if len(fields) > sep + 3 else [],
            }
        )
    return mounts


def mount_for(mounts: list[dict], path: str) -> Optional[dict]:
    """The mount that holds ``path``: the longest mount point prefix, the last one mounted."""
    path = posixpath.normpath("/" + path.lstrip("/"))
    best = None
    for m in mounts:
        mp = m["mount_point"]
        if path == mp or path.startswith(mp.rstrip("/") + "/") or mp == "/":
            if best is None or len(mp) >= len(best["mount_point"]):
                best = m
    return best


def parse_link_speed(text: str) -> Optional[float]:
    """'16.0 GT/s PCIe' -> 16.0 (GT/s); 'Unknown' -> None.  Never raises."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*GT/s", str(text))
    return float(m.group(1)) if m else None


# PCIe generation by transfer rate in GT/s.
GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_link(host: Host, device_dir: str) -> dict:
    """Current and maximum PCIe speed, generation and width of a PCI device directory."""
    out: dict = {}
    for which in ("current", "max"):
        speed = parse_link_speed(host.try_read(f"{device_dir}/{which}_link_speed") or "")
        width_text = (host.try_read(f"{device_dir}/{which}_link_width") or "").strip()
        out[f"{which}_speed_gts"] = speed
        out[f"{which}_gen"] = GEN_BY_SPEED.get(speed) if speed else None
        out[f"{which}_width"] = int(width_text) if width_text.isdigit() else None
    return out


def nvme_controllers(host: Host) -> list[dict]:
    ctrls: list[dict] = []
    for name in host.try_listdir("/sys/class/nvme"):
        base = f"/sys/class/nvme/{name}"
        ctrl = {
            "name": name,
            "model": (host.try_read(f"{base}/model") or "").strip() or None,
            "firmware": (host.try_read(f"{base}/firmware_rev") or "").strip() or None,
            "transport": (host.try_read(f"{base}/transport") or "").strip() or None,
        }
        ctrl.update(pcie_link(host, f"{base}/device"))
        ctrls.append(ctrl)
    return ctrls


def _disk_rotational(host: Host, devno: str) -> tuple[Optional[bool], Optional[str], str]:
    """(rotational, disk name, reason when unknown) for a block device number."""
    base = f"/sys/dev/block/{devno}"
    if not host.exists(base):
        return None, None, f"no block device {devno} (a virtual or overlay filesystem)"
    real = host.realpath(base)
    name = posixpath.basename(real)
    # A partition's queue lives on its disk (the parent directory).
    for cand in (real, posixpath.dirname(real)):
        rot = host.try_read(f"{cand}/queue/rotational")
        if rot is not None and rot.strip() in ("0", "1"):
            disk = posixpath.basename(cand)
            # device-mapper (LVM, LUKS): the disk underneath decides.
            slaves = host.try_listdir(f"{cand}/slaves")
            if slaves:
                rots = []
                for s in slaves:
                    r = host.try_read(f"/sys/class/block/{s}/queue/rotational") or host.try_read(
                        f"/sys/class/block/{s}/../queue/rotational")
                    if r is not None and r.strip() in ("0", "1"):
                        rots.append(r.strip() == "1")
                if rots:
                    return any(rots), f"{disk} on {','.join(slaves)}", ""
            return rot.strip() == "1", disk, ""
    return None, name, "no queue/rotational in sysfs"


def data_path(host: Host, path: str) -> dict:
    sec = Section(path=path)
    if not host.exists(path):
        sec["exists"] = False
        sec.unknown("fstype", "path does not exist")
        return sec
    sec["exists"] = True
    real = host.realpath(path)
    sec["realpath"] = real
    text = host.try_read("/proc/self/mountinfo")
    if text is None:
        sec.unknown("fstype", "/proc/self/mountinfo unreadable")
        return sec
    m = mount_for(parse_mountinfo(text), real)
    if m is None:
        sec.unknown("fstype", "no mount holds this path")
        return sec
    sec["mount_point"] = m["mount_point"]
    sec["fstype"] = m["fstype"]
    sec["source"] = m["source"]
    sec["options"] = m["options"]
    sec["network"] = m["fstype"] in NETWORK_FS or m["fstype"].startswith("nfs")
    if sec["network"]:
        sec["rotational"] = None
        sec.setdefault("unknown", {})["rotational"] = "network filesystem"
    else:
        rot, disk, reason = _disk_rotational(host, m["devno"])
        sec["device"] = disk
        sec.set_or_unknown("rotational", rot, reason)
    try:
        st = host.statvfs(real)
        sec["free_bytes"] = st["free"]
        sec["total_bytes"] = st["total"]
    except Unavailable as exc:
        sec.unknown("free_bytes", exc.reason)
    return sec


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    sec["nvme"] = nvme_controllers(host)
    sec["data"] = data_path(host, ctx.options.data) if ctx.options.data else None
    return sec
