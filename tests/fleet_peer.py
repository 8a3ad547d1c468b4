"""Ranks that misbehave, for tests/test_fleet_gather.py: they speak to the fleet's TCPStore directly,
as another (or a broken) debtorch would.

    python tests/fleet_peer.py ADDR PORT PREFIX RANK:BEHAVIOUR ...

BEHAVIOUR is ``died`` (say hello, then exit without a document), ``malformed`` (send bytes
that are not a document) or ``schema`` (send facts of schema_version 2).  The ranks that
sent something wait for rank 0's verdict, acknowledge it, and print ``RANK CODE``.
"""

import json
import sys
import zlib
from datetime import timedelta

import torch.distributed as dist


def main() -> int:
    addr, port, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    stores = {}
    for spec in sys.argv[4:]:
        rank, behaviour = spec.split(":")
        base = dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=60))
        store = dist.PrefixStore(prefix, base)
        store.set(f"hello/{rank}", f"peer-{behaviour}")
        store.append("joined", f"{rank},")
        if behaviour == "died":
            continue
        if behaviour == "malformed":
            data = b"\x00\x01 this is not a document"
        else:
            facts = {"schema_version": 2, "debtorch_version": "9.0.0", "os": {"hostname": "future"}}
            data = zlib.compress(json.dumps({"fleet": 1, "rank": int(rank), "node": f"peer-{behaviour}",
                                             "findings": [], "facts": facts}).encode())
        store.set(f"doc/{rank}", data)
        store.append("arrived", f"{rank},")
        stores[rank] = (base, store)
    for rank, (_, store) in stores.items():
        store.wait(["verdict"], timedelta(seconds=120))
        print(rank, json.loads(store.get("verdict"))["code"], flush=True)
        store.add("acks", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
