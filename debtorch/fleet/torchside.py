"""The torch side of ``debtorch fleet``: one process per rank, in the user's interpreter.

:mod:`debtorch.fleet.gather` starts this module through
:class:`debtorch.transport.client.Worker` and speaks the transport's protocol
(docs/engine.md): JSON requests on stdin, results on the protocol
descriptor.  Everything that touches torch.distributed is here; debtorch's
own process never imports torch.  Standard library only at import time.

The rendezvous is torch.distributed's own TCPStore: rank 0 hosts it (or,
under torchrun, the agent already does and every rank is a client), every
key of the run lives under a prefix.  Keys:

* ``hello/<rank>``: the node's name, set as soon as a rank joins;
  ``joined``: the ranks that did, appended;
* ``doc/<rank>``: the node's document (zlib-compressed JSON), then
  ``arrived``: the ranks whose document is in;
* ``plan``, ``verdict``: what rank 0 tells every rank (the probe to run, the
  exit code); ``acks`` counts the ranks that read the verdict, so that rank 0
  keeps the store up until they have;
* ``probe/<rank>``: a rank's probe results; the probe's process group meets
  under ``pg/``.

Ops: ``join``, ``send``, ``collect`` (rank 0; with ``key: probe`` it collects
the probe's results), ``publish`` (rank 0), ``await``, ``ack``, ``finish``
(rank 0), ``caps``, ``probe``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import timedelta

from debtorch.transport import server
from debtorch.transport.server import BadRequest

POLL_S = 0.05


def _ranks(text: bytes) -> list:
    return sorted({int(x) for x in text.decode().split(",") if x.strip().isdigit()})


class FleetSession(server.Session):
    """What one rank's torch side holds between requests: the store and where it is."""

    def __init__(self, proto):
        super().__init__(proto)
        self.store = None
        self.rank = 0
        self.world = 1
        self.started = time.monotonic()

    def handle(self, req: dict) -> dict:
        if req.get("op") != "join" and self.store is None and hasattr(self, f"op_{req.get('op')}"):
            raise BadRequest("join first")
        return super().handle(req)

    # -- the rendezvous ----------------------------------------------------
    def op_join(self, req: dict) -> dict:
        import torch.distributed as dist

        self.rank, self.world = int(req["rank"]), int(req["world"])
        timeout = timedelta(seconds=float(req["timeout_s"]))
        addr, port = str(req["addr"]), int(req["port"])
        try:
            if req.get("agent_store") or self.rank != 0:
                base = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            else:
                base = dist.TCPStore(addr, port, is_master=True, timeout=timeout, wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - the reason is the user's to read
            where = f"{addr}:{port}"
            what = "listen on" if self.rank == 0 and not req.get("agent_store") else "reach rank 0's store at"
            raise RuntimeError(f"could not {what} {where} within {timeout.total_seconds():g} s: "
                               f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
        self.store = dist.PrefixStore(str(req["prefix"]), base)
        self._base = base
        self.started = time.monotonic()
        self.store.set(f"hello/{self.rank}", str(req.get("node") or f"rank {self.rank}"))
        self.store.append("joined", f"{self.rank},")
        return {"rank": self.rank, "world": self.world}

    def op_send(self, req: dict) -> dict:
        with open(req["path"], "rb") as fh:
            data = fh.read()
        self.store.set(f"doc/{self.rank}", data)
        self.store.append("arrived", f"{self.rank},")
        return {"bytes": len(data)}

    def _listed(self, key: str) -> list:
        return _ranks(self.store.get(key)) if self.store.check([key]) else []

    def op_collect(self, req: dict) -> dict:
        """Rank 0: wait until every rank's document is in or the deadline passes; write them to files."""
        deadline = self.started + float(req["deadline_s"])
        out, prefix = req["out_dir"], str(req.get("key") or "doc")
        files: dict = {}
        listing = "arrived" if prefix == "doc" else f"{prefix}_arrived"
        while True:
            for r in self._listed(listing):
                if r not in files:
                    path = os.path.join(out, f"{prefix}-{r}.bin")
                    with open(path, "wb") as fh:
                        fh.write(self.store.get(f"{prefix}/{r}"))
                    files[r] = path
            if len(files) >= self.world or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        joined = self._listed("joined")
        names = {r: self.store.get(f"hello/{r}").decode(errors="replace") for r in joined}
        return {"files": files, "joined": names, "waited_s": round(time.monotonic() - self.started, 3)}

    def op_publish(self, req: dict) -> dict:
        self.store.set(str(req["key"]), json.dumps(req.get("value")))
        return {}

    def op_await(self, req: dict) -> dict:
        key = str(req["key"])
        try:
            self.store.wait([key], timedelta(seconds=float(req["timeout_s"])))
        except Exception:  # noqa: BLE001 - DistStoreError, or the store went away
            raise RuntimeError(f"rank 0 said nothing ({key}) within {float(req['timeout_s']):g} s") from None
        return {"value": json.loads(self.store.get(key))}

    def op_ack(self, req: dict) -> dict:
        self.store.add("acks", 1)
        return {}

    def op_finish(self, req: dict) -> dict:
        """Rank 0: keep the store up until ``expected`` ranks read the verdict, or ``timeout_s``."""
        deadline = time.monotonic() + float(req["timeout_s"])
        expected = int(req["expected"])
        acks = 0
        while time.monotonic() < deadline:
            acks = self.store.add("acks", 0)
            if acks >= expected:
                break
            time.sleep(POLL_S)
        return {"acks": acks}

    # -- the probe -----------------------------------------------------------
    def op_caps(self, req: dict) -> dict:
        """What this interpreter's torch can probe with: a GPU (nccl) or the CPU (gloo)."""
        import torch

        cuda = bool(torch.cuda.is_available()) and torch.distributed.is_nccl_available()
        return {"cuda": cuda, "devices": torch.cuda.device_count() if cuda else 0}

    def op_probe(self, req: dict) -> dict:
        """Run the plan's compute check and pairwise all-reduces; store and return this rank's results."""
        plan = req["plan"]
        try:
            result = run_probe(self.store, self.rank, self.world, plan)
        except Exception as exc:  # noqa: BLE001 - a failed probe is a result
            result = {"rank": self.rank, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
        self.store.set(f"probe/{self.rank}", json.dumps(result))
        self.store.append("probe_arrived", f"{self.rank},")
        return result


# ---------------------------------------------------------------------------
# The probe itself


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compute_check(torch, device, seconds: float, n: int) -> dict:
    """n x n matmuls for ``seconds``: GFLOP/s over the whole window (products done / time taken).

    The whole window, not the median product: a node that gets less CPU time (a quota, a busy
    neighbour) runs each product at full speed and loses the time between them."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    _sync(torch, device)
    times = []
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter()
        a @ b
        _sync(torch, device)
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    return {"n": n, "iterations": len(times), "seconds": elapsed, "median_s": statistics.median(times),
            "gflops": 2 * n ** 3 * len(times) / elapsed / 1e9}


def pair_allreduce(torch, dist, device, group, seconds: float, size_bytes: int) -> dict:
    """All-reduce a buffer with one partner for ``seconds``; bus bandwidth as nccl-tests defines it.

    The last element carries each side's wish to go on: the sum is 2 while both do, so the
    pair stops together without a second collective per iteration.  Like nccl-tests
    (doc/PERFORMANCE.md), the time of a batch of iterations over their count: stalls between
    all-reduces count.  busbw = algbw * 2 (n - 1) / n for all-reduce, n = 2."""
    numel = max(2, size_bytes // 4)
    buf = torch.zeros(numel, dtype=torch.float32, device=device)
    warm, least = 2, 3
    stamps = [time.perf_counter()]
    while True:
        buf.zero_()
        buf[-1] = 1.0 if (stamps[-1] - stamps[0] < seconds or len(stamps) <= warm + least) else 0.0
        dist.all_reduce(buf, group=group)
        _sync(torch, device)
        stamps.append(time.perf_counter())
        if float(buf[-1]) < 2.0:
            break
    window = stamps[warm:] if len(stamps) > warm + 1 else stamps
    count = len(window) - 1
    mean = (window[-1] - window[0]) / count
    steps = [b - a for a, b in zip(window, window[1:])]
    n = 2
    algbw = numel * 4 / mean
    return {"iterations": count, "mean_s": mean, "median_s": statistics.median(steps),
            "algbw_gbs": algbw / 1e9, "busbw_gbs": algbw * 2 * (n - 1) / n / 1e9}


def run_probe(store, rank: int, world: int, plan: dict) -> dict:
    import torch
    import torch.distributed as dist

    backend = plan.get("backend") or "gloo"
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    timeout = timedelta(seconds=float(plan["timeout_s"]))
    # Every wait of the probe (process groups meeting on the store included) is bounded by the budget.
    saved = store.timeout
    store.set_timeout(timeout)
    dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank, world_size=world,
                            timeout=timeout)
    try:
        out: dict = {"rank": rank, "backend": backend, "device": str(device), "threads": torch.get_num_threads()}
        dist.barrier()
        out["compute"] = compute_check(torch, device, float(plan["compute_s"]), int(plan["matrix_n"]))
        out["pairs"] = []
        for round_no, pairs in enumerate(plan.get("rounds") or []):
            dist.barrier()
            mine = next((p for p in pairs if rank in p), None)
            # One group per rank per round, a rank sitting out (odd worlds) included: with
            # use_local_synchronization a group's name hashes its ranks with the number of groups the
            # rank made so far (torch/distributed/distributed_c10d.py, _hash_ranks_to_str), so the two
            # members of a pair must have made as many.
            group = dist.new_group(ranks=sorted(mine) if mine else [rank], use_local_synchronization=True)
            if mine is None:
                continue
            partner = mine[0] if mine[1] == rank else mine[1]
            res = pair_allreduce(torch, dist, device, group, float(plan["round_s"]), int(plan["size_bytes"]))
            res.update(partner=partner, round=round_no)
            out["pairs"].append(res)
        dist.barrier()
        return out
    finally:
        dist.destroy_process_group()
        store.set_timeout(saved)


def main() -> int:
    return server.main(FleetSession)


if __name__ == "__main__":
    sys.exit(main())
