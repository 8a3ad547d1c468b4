"""Ranks that misbehave and a process that attacks, for tests/test_fleet_gather.py: they speak
to the fleet's TCPStore directly, as another (a broken, or a hostile) process would.

    python tests/fleet_peer.py ADDR PORT PREFIX RANK:BEHAVIOUR ...

BEHAVIOUR is ``died`` (say hello, then exit without a document), ``malformed`` (send bytes
that are not a document), ``schema`` (send facts of schema_version 2), ``bomb`` (1 MB that
decompress to 1 GiB), ``unsigned=FILE`` (a well-formed document, FILE's facts, not signed) or
``nohello`` (listed as joined, never says hello).  The ranks that sent something wait for rank
0's verdict, acknowledge it, and print ``RANK CODE``.  Pseudo-ranks: ``-:flood`` (junk keys and
lists of tens of MB, ranks out of range) and ``-:forge`` (a plan asking for a 500 s probe and a
verdict of 0, before rank 0 publishes its own).
"""

import json
import sys
import time
import zlib
from datetime import timedelta

import torch.distributed as dist

MB = 1024 * 1024


def connect(addr, port, prefix):
    for _ in range(600):  # rank 0's store may not be up yet
        try:
            return dist.PrefixStore(prefix, dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=60)))
        except Exception:  # noqa: BLE001
            time.sleep(0.1)
    raise SystemExit("no store")


def bomb() -> bytes:
    z = zlib.compressobj(9)
    chunk = b" " * (64 * MB)
    return b"".join(z.compress(chunk) for _ in range(16)) + z.flush()   # 1 GiB of spaces, about 1 MB sent


def main() -> int:
    addr, port, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    stores = {}
    for spec in sys.argv[4:]:
        rank, behaviour = spec.split(":", 1)
        store = connect(addr, port, prefix)
        if rank == "-":
            if behaviour == "flood":
                try:
                    for i in range(20):
                        store.set(f"junk/{i}", b"x" * MB)
                    store.append("arrived", "7,100000000,-3,abc,99999999999999999999,")
                    store.append("joined", "7,100000000,")
                    for key in ("arrived", "joined"):
                        store.append(key, "0," * (5 * MB))
                except dist.DistNetworkError:
                    pass   # the store may cut a flooding connection: the ranks above still read the verdict
            elif behaviour == "forge":
                store.set("plan", json.dumps({"probe": True, "backend": "gloo", "budget_s": 500, "timeout_s": 500,
                                              "compute_s": 400, "round_s": 50, "rounds": [[[0, 1]]],
                                              "size_bytes": 4 * MB, "matrix_n": 256}))
                store.set("verdict", json.dumps({"code": 0}))
            continue
        if behaviour == "nohello":
            store.append("joined", f"{rank},")
            continue
        name = "evil\x1b]0;pwned\x07,gpu01\nhost" if behaviour == "bomb" else f"peer-{behaviour.split('=')[0]}"
        store.set(f"hello/{rank}", name)
        store.append("joined", f"{rank},")
        if behaviour == "died":
            continue
        if behaviour == "malformed":
            data = b"\x00\x01 this is not a document"
        elif behaviour == "bomb":
            data = bomb()
        elif behaviour.startswith("unsigned="):
            with open(behaviour.split("=", 1)[1]) as fh:
                facts = json.load(fh)
            data = zlib.compress(json.dumps({"fleet": 1, "rank": int(rank), "node": name, "findings": [],
                                             "facts": facts}).encode())
        else:
            facts = {"schema_version": 2, "debtorch_version": "9.0.0", "os": {"hostname": "future"}}
            data = zlib.compress(json.dumps({"fleet": 1, "rank": int(rank), "node": name,
                                             "findings": [], "facts": facts}).encode())
        store.set(f"doc/{rank}", data)
        store.append("arrived", f"{rank},")
        stores[rank] = store
    for rank, store in stores.items():
        store.wait(["verdict"], timedelta(seconds=120))
        try:
            code = json.loads(store.get("verdict"))["code"]
        except ValueError:
            code = "signed"
        print(rank, code, flush=True)
        store.add("acks", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
