"""The torch side of ``debtorch fleet``: one process per rank in the user's interpreter, a transport
session (docs/engine.md) that :mod:`debtorch.fleet.gather` talks to; everything that touches
torch.distributed is here.  Standard library only at import time.

The rendezvous is torch.distributed's TCPStore (rank 0 hosts it unless torchrun's agent does), every
key under the run's prefix: ``nonce`` (rank 0's random word, with a secret), ``hello/<rank>`` (the
node's name) and the list ``joined``, ``doc/<rank>`` (zlib-compressed JSON) and ``arrived``, ``plan``
and ``verdict`` (from rank 0) with ``acks``, ``probe/<rank>`` (the probe's process group under
``pg/``).  The store is not trusted (docs/security.md, "fleet's store"): every value is bounded and
checked where it is read; with a secret every value is signed.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import os
import statistics
import sys
import time
import zlib
from datetime import timedelta

from debtorch.transport import server
from debtorch.transport.server import BadRequest

POLL_S = 0.05
MAX_DOC = 8 * 1024 * 1024     # a document once decompressed (a real one is about 40 KB)
MAX_SENT = 8 * 1024 * 1024    # a value as it was sent
MAX_NAME = 256                # a hello (the node's name)
MAX_SMALL = 64 * 1024         # the plan, the verdict
SIGNED = b"DTS1"              # a signed value: SIGNED + HMAC-SHA256 tag (32 bytes) + the value


def inflate(data: bytes, limit: int) -> bytes:
    """``data`` zlib-decompressed, a bounded piece at a time: ValueError once it would pass ``limit``."""
    try:
        d = zlib.decompressobj()
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"not a document (zlib: {exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise ValueError(f"larger than {limit // (1024 * 1024)} MiB once decompressed")
    return out


class FleetSession(server.Session):
    """What one rank's torch side holds between requests: the store and where it is."""

    def __init__(self, proto):
        super().__init__(proto)
        self.store, self.rank, self.world, self.started = None, 0, 1, time.monotonic()
        self.secret = self.nonce = None
        self.prefix = ""
        self.flooded: set = set()    # lists someone filled with junk: read rank by rank instead

    def handle(self, req: dict) -> dict:
        if req.get("op") != "join" and self.store is None and hasattr(self, f"op_{req.get('op')}"):
            raise BadRequest("join first")
        return super().handle(req)

    # -- signing -----------------------------------------------------------
    def _tag(self, key: str, value: bytes) -> bytes:
        msg = b"\0".join((self.prefix.encode(), key.encode(), self._nonce(), value))
        return hmac.new(self.secret, msg, hashlib.sha256).digest()

    def _nonce(self) -> bytes:   # rank 0's random word for this run: another run's signatures fail
        if self.nonce is None:
            self.store.wait(["nonce"], timedelta(seconds=max(1.0, self.deadline - time.monotonic())))
            self.nonce = self.store.get("nonce")[:64]
        return self.nonce

    def _seal(self, key: str, value: bytes) -> bytes:
        return value if self.secret is None else SIGNED + self._tag(key, value) + value

    def _open(self, key: str, value: bytes) -> bytes:
        """The value of a signed ``key``; ValueError when it cannot be trusted."""
        if self.secret is None:
            if value.startswith(SIGNED):
                raise ValueError("signed with a secret this rank was not given")
            return value
        if not value.startswith(SIGNED):
            raise ValueError("not signed with the fleet's secret")
        if not hmac.compare_digest(value[4:36], self._tag(key, value[36:])):
            raise ValueError("its signature does not verify (another secret, another run, or altered)")
        return value[36:]

    # -- the rendezvous ----------------------------------------------------
    def op_join(self, req: dict) -> dict:
        import torch.distributed as dist

        self.rank, self.world = int(req["rank"]), int(req["world"])
        timeout = timedelta(seconds=float(req["timeout_s"]))
        self.deadline = time.monotonic() + timeout.total_seconds()
        addr, port = str(req["addr"]), int(req["port"])
        self.secret = req["secret"].encode("latin-1") if req.get("secret") else None
        try:
            if req.get("agent_store") or self.rank != 0:
                base = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            else:
                base = dist.TCPStore(addr, port, is_master=True, timeout=timeout, wait_for_workers=False,
                                     master_listen_fd=_listen(str(req.get("listen", addr)), port))
        except Exception as exc:  # noqa: BLE001 - the reason is the user's to read
            where = f"{req.get('listen') or addr}:{port}"
            what = "listen on" if self.rank == 0 and not req.get("agent_store") else "reach rank 0's store at"
            raise RuntimeError(f"could not {what} {where} within {timeout.total_seconds():g} s: "
                               f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
        self.prefix = str(req["prefix"])
        self.store = dist.PrefixStore(self.prefix, base)
        self._base = base
        self.started = time.monotonic()
        if self.secret is not None and self.rank == 0:
            self.nonce = os.urandom(16).hex().encode()
            self.store.set("nonce", self.nonce)
        self.store.set(f"hello/{self.rank}", str(req.get("node") or f"rank {self.rank}")[:MAX_NAME])
        self.store.append("joined", f"{self.rank},")
        return {"rank": self.rank, "world": self.world}

    def op_send(self, req: dict) -> dict:
        with open(req["path"], "rb") as fh:
            data = fh.read()
        key = f"doc/{self.rank}"
        self.store.set(key, self._seal(key, data))
        self.store.append("arrived", f"{self.rank},")
        return {"bytes": len(data)}

    def _listed(self, key: str, what: str) -> collections.Counter:
        """How often each rank in range is named in the list ``key``.  A list flooded far beyond
        what the ranks can have written is not parsed: each rank's ``what/<rank>`` is looked up."""
        raw = self.store.get(key) if key not in self.flooded and self.store.check([key]) else b""
        if key in self.flooded or len(raw) > 8 * self.world + 4096:
            self.flooded.add(key)   # (a refused document is then fetched again once a second)
            tick = int(time.monotonic())
            return collections.Counter({r: tick for r in range(self.world) if self.store.check([f"{what}/{r}"])})
        items = (x.strip() for x in raw.split(b","))
        return collections.Counter(r for r in (int(x) for x in items if x.isdigit() and len(x) < 8) if r < self.world)

    def _hello(self, r: int):
        return self.store.get(f"hello/{r}")[:MAX_NAME].decode(errors="replace") \
            if self.store.check([f"hello/{r}"]) else None

    def _document(self, what: str, r: int) -> bytes:
        """Rank ``r``'s document (JSON text) when it can be taken; ValueError says why not."""
        hello = self._hello(r)
        if hello is None:
            raise ValueError("sent a document without saying hello")
        value = self.store.get(f"{what}/{r}")
        if len(value) > MAX_SENT:
            raise ValueError(f"sent {len(value)} bytes, more than {MAX_SENT // (1024 * 1024)} MiB")
        data = self._open(f"{what}/{r}", value)
        data = inflate(data, MAX_DOC) if data[:1] == b"\x78" else data
        if len(data) > MAX_DOC:
            raise ValueError(f"larger than {MAX_DOC // (1024 * 1024)} MiB")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not a document ({str(exc)[:80]})") from None
        if not isinstance(doc, dict) or doc.get("rank") != r or doc.get("node", hello) != hello:
            got = (doc.get("rank"), doc.get("node")) if isinstance(doc, dict) else (None, None)
            raise ValueError(f"its envelope (rank {str(got[0])[:12]}, node {str(got[1])[:40]!r}) does not match "
                             f"its hello (rank {r}, node {hello[:40]!r})")
        return data

    def op_collect(self, req: dict) -> dict:
        """Rank 0: wait until every rank's document is in or the deadline passes; write them to files.
        A rank counts once its document can be taken; one that cannot is fetched again when the rank
        (or anyone) names it in the list once more, and is reported with why (``bad``)."""
        deadline = self.started + float(req["deadline_s"])
        out, what = req["out_dir"], str(req.get("key") or "doc")
        listing = "arrived" if what == "doc" else f"{what}_arrived"
        files: dict = {}
        bad: dict = {}
        seen: collections.Counter = collections.Counter()
        while True:
            for r, count in self._listed(listing, what).items():
                if r in files or seen[r] >= count:
                    continue
                seen[r] = count
                try:
                    data = self._document(what, r)
                except ValueError as exc:
                    bad[r] = str(exc)
                    continue
                files[r] = os.path.join(out, f"{what}-{r}.json")
                with open(files[r], "wb") as fh:
                    fh.write(data)
                bad.pop(r, None)
            if len(files) >= self.world or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        names = {r: self._hello(r) for r in self._listed("joined", "hello")}
        return {"files": files, "bad": bad, "joined": {r: n for r, n in names.items() if n is not None},
                "waited_s": round(time.monotonic() - self.started, 3)}

    def op_publish(self, req: dict) -> dict:
        key = str(req["key"])
        self.store.set(key, self._seal(key, json.dumps(req.get("value")).encode()))
        return {}

    def op_await(self, req: dict) -> dict:
        """The value rank 0 published under ``key``; a value that is not signed (with a secret) is
        someone else's: wait on for rank 0's own until ``timeout_s``."""
        key, timeout = str(req["key"]), float(req["timeout_s"])
        start = time.monotonic()
        why = f"said nothing ({key})"
        while True:
            left = timeout - (time.monotonic() - start)
            try:
                self.store.wait([key], timedelta(seconds=max(0.1, left)))
                value = self.store.get(key)
            except Exception:  # noqa: BLE001 - DistStoreError, or the store went away
                waited = time.monotonic() - start
                if waited < timeout - 1:
                    raise RuntimeError(f"rank 0's store went away before it said {key} ({waited:.0f} s)") from None
                raise RuntimeError(f"rank 0 {why} within {timeout:g} s") from None
            try:
                return {"value": json.loads(self._open(key, value[:MAX_SMALL]))}
            except ValueError as exc:
                if self.secret is None:
                    raise RuntimeError(f"rank 0's {key} cannot be used: {exc}") from None
                why = f"sent no {key} that verifies ({exc})"
                if left <= 0:
                    raise RuntimeError(f"rank 0 {why} within {timeout:g} s") from None
                time.sleep(POLL_S)

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
        key = f"probe/{self.rank}"
        self.store.set(key, self._seal(key, json.dumps(result).encode()))
        self.store.append("probe_arrived", f"{self.rank},")
        return result


def _listen(addr: str, port: int) -> int:
    """A socket listening on ``addr`` ("": every interface) for the store to take over: TCPStore's
    own server would listen on every interface whatever MASTER_ADDR says."""
    import socket

    family, _, _, _, where = socket.getaddrinfo(addr or None, port, type=socket.SOCK_STREAM,
                                                flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(where)
    sock.listen(2048)
    return sock.detach()


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
