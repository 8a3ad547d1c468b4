"""The torch side of ``debtorch fleet``: one process per rank in the user's interpreter, a transport
session (docs/engine.md) that :mod:`debtorch.fleet.gather` talks to; everything that touches
torch.distributed is here.  Standard library only at import time.

The rendezvous is torch.distributed's TCPStore (rank 0 hosts it unless torchrun's agent does), every
key under the run's prefix: ``nonce`` (rank 0's random word, with a secret), ``hello/<rank>`` (the
node's name) and the list ``joined``; ``dig/<rank>`` (the node's digests, with its own random
challenge) and the list ``dig_arrived``; ``plan/<rank>`` (rank 0's plan for that rank: whether to send
its whole document, whether to probe); ``doc/<rank>`` (the whole document, zlib-compressed JSON, when
asked, or at once from a rank of the first protocol) and the list ``arrived``; ``verdict/<rank>`` with
``acks``; the plain ``plan`` and ``verdict`` for ranks that sent their whole document at once;
``probe/<rank>`` and ``probe_arrived`` (the probe's process group under ``pg/``).  The store is not
trusted (docs/security.md, "fleet's store"): every value is read with its length first and refused
above its cap (:class:`Reader`), bounded and checked where it is read; with a secret every value is
signed, what rank 0 sends a rank bound to that rank's challenge.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import os
import re
import socket
import statistics
import struct
import sys
import time
import zlib
from datetime import timedelta
from typing import Any, Optional

from debtorch.transport import server
from debtorch.transport.server import BadRequest

POLL_S = 0.05
MAX_DOC = 8 * 1024 * 1024     # a document once decompressed (a real one is about 40 KB)
MAX_SENT = 8 * 1024 * 1024    # a value as it was sent
MAX_NAME = 256                # a hello (the node's name)
MAX_DIGESTS = 64 * 1024       # a node's digests (about 1 KB)
MAX_SMALL = 64 * 1024         # the plan, the verdict, a probe's result
MAX_NONCE = 64
SIGNED = b"DTS1"              # a signed value: SIGNED + HMAC-SHA256 tag (32 bytes) + the value
CHALLENGE = re.compile(r"[0-9a-f]{32}")


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


class TooLarge(ValueError):
    """A value longer than its reader's cap: refused without being read."""

    def __init__(self, size: int, cap: int):
        super().__init__(f"sent {size} bytes, more than {_size(cap)}")
        self.size = size


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"


class Reader:
    """Reads values of the store the way a TCPStore client does (its wire protocol: a connection
    says the validation word, a GET sends the key and is answered by the value's length, then the
    value), but looks at the length first: a value above ``cap`` is refused and never read, its
    connection dropped (torch's own ``get`` reads any length whole, into two copies).  ``key_of``
    turns a key of this run into the key on the wire (the prefix store's and TCPStore's own
    prefixes).  A key that is not set reads as None (torch's libuv store answers an empty value)."""

    VALIDATE, GET, CHECK = 0, 3, 5      # torch/csrc/distributed/c10d/TCPStoreBackend.hpp, QueryType
    READY = 0                           # CheckResponseType::READY there
    MAGIC = 0x3C85F7CE                  # validationMagicNumber there

    def __init__(self, addr: str, port: int, wire_prefix: str, timeout: float = 30.0):
        self.addr, self.port, self.wire_prefix, self.timeout = addr, port, wire_prefix, timeout
        self.sock: Optional[socket.socket] = None

    def key_of(self, key: str) -> bytes:
        return (self.wire_prefix + key).encode()

    def _connect(self) -> socket.socket:
        if self.sock is None:
            sock = socket.create_connection((self.addr, self.port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(struct.pack("<BI", self.VALIDATE, self.MAGIC))
            self.sock = sock
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def _recv(self, n: int) -> bytes:
        assert self.sock is not None
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("the store closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def get_many(self, keys: list[str], cap: int, truncate: bool = False) -> list[Any]:
        """Each key's value (bytes, None when unset, or a :class:`TooLarge`), asked for at once.
        With ``truncate`` a longer value gives its first ``cap`` bytes instead."""
        out: list[Any] = []
        while len(out) < len(keys):
            rest = keys[len(out):]
            sock = self._connect()
            try:
                sock.sendall(b"".join(struct.pack("<BQ", self.GET, len(k)) + k for k in map(self.key_of, rest)))
                for _ in rest:
                    size = struct.unpack("<Q", self._recv(8))[0]
                    if size > cap:
                        out.append(self._recv(cap) if truncate else TooLarge(size, cap))
                        self.close()      # the rest of it is never read
                        break
                    out.append(self._recv(size) if size else None)
            except (OSError, ConnectionError):
                self.close()
                raise
        return out

    def exists_many(self, keys: list[str]) -> list[bool]:
        """Whether each key is set (a CHECK each, asked for at once: one byte back, no value read)."""
        sock = self._connect()
        try:
            sock.sendall(b"".join(struct.pack("<BQQ", self.CHECK, 1, len(k)) + k for k in map(self.key_of, keys)))
            return [byte == self.READY for byte in self._recv(len(keys))]
        except (OSError, ConnectionError):
            self.close()
            raise

    def get(self, key: str, cap: int, truncate: bool = False) -> Optional[bytes]:
        """``key``'s value (None when unset); :class:`TooLarge` above ``cap`` unless ``truncate``."""
        value = self.get_many([key], cap, truncate)[0]
        if isinstance(value, TooLarge):
            raise value
        return value


class FleetSession(server.Session):
    """What one rank's torch side holds between requests: the store and where it is."""

    def __init__(self, proto: Any):
        super().__init__(proto)
        self.store: Any = None
        self.rank, self.world, self.started = 0, 1, time.monotonic()
        self.deadline = self.started
        self.secret: Optional[bytes] = None
        self.nonce: Optional[bytes] = None
        self.prefix = ""
        self.reader: Optional[Reader] = None      # None: values are read whole by torch's store, then checked
        self.challenge: Optional[str] = None      # this rank's own random word (None: the first protocol)
        self.challenges: dict[int, str] = {}      # rank 0: each rank's, from its verified digests
        self.flooded: set = set()    # lists someone filled with junk: read rank by rank instead

    def handle(self, req: dict) -> dict:
        if req.get("op") != "join" and self.store is None and hasattr(self, f"op_{req.get('op')}"):
            raise BadRequest("join first")
        return super().handle(req)

    # -- reading, bounded ----------------------------------------------------
    def _read(self, key: str, cap: int, truncate: bool = False) -> Optional[bytes]:
        """``key``'s value, None when unset; :class:`TooLarge` above ``cap`` (with ``truncate``: its
        first ``cap`` bytes).  Through the :class:`Reader` its length is known before it is read."""
        if self.reader is not None:
            return self.reader.get(key, cap, truncate)
        if not self.store.check([key]):
            return None
        value = self.store.get(key)
        if len(value) > cap and not truncate:
            raise TooLarge(len(value), cap)
        return value[:cap]

    def _exist(self, keys: list[str]) -> list[bool]:
        if self.reader is not None:
            return self.reader.exists_many(keys)
        return [bool(self.store.check([key])) for key in keys]

    def _forget(self, key: str) -> None:
        """Delete a value refused for its size: torch's store would keep it (and copy it to answer
        every read of it)."""
        try:
            self.store.delete_key(key)
        except Exception:  # noqa: BLE001 - a store without delete_key keeps it; it is never read again
            pass

    def _read_many(self, keys: list[str], cap: int, truncate: bool = False) -> list[Any]:
        if self.reader is not None:
            return self.reader.get_many(keys, cap, truncate)
        out: list[Any] = []
        for key in keys:
            try:
                out.append(self._read(key, cap, truncate))
            except TooLarge as exc:
                out.append(exc)
        return out

    # -- signing -----------------------------------------------------------
    def _tag(self, key: str, value: bytes) -> bytes:
        assert self.secret is not None
        msg = b"\0".join((self.prefix.encode(), key.encode(), self._nonce(), value))
        return hmac.new(self.secret, msg, hashlib.sha256).digest()

    def _nonce(self) -> bytes:   # rank 0's random word for this run: another run's signatures fail
        if self.nonce is None:
            self.store.wait(["nonce"], timedelta(seconds=max(1.0, self.deadline - time.monotonic())))
            self.nonce = (self._read("nonce", MAX_NONCE, truncate=True) or b"")[:MAX_NONCE]
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
        nofile = None
        try:
            if req.get("agent_store") or self.rank != 0:
                base = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            else:
                nofile = _descriptors_for(self.world + 256)
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
        self.challenge = os.urandom(16).hex()
        hello = str(req.get("node") or f"rank {self.rank}")[:MAX_NAME]
        self.store.set(f"hello/{self.rank}", hello)
        self.reader = _reader(addr, port, self.prefix, self.store, f"hello/{self.rank}", hello.encode())
        self.store.append("joined", f"{self.rank},")
        return {"rank": self.rank, "world": self.world, "challenge": self.challenge,
                "bounded": self.reader is not None, "descriptors": nofile}

    def op_send(self, req: dict) -> dict:
        """Put this rank's ``key`` (``doc`` by default, or ``dig``) from the file at ``path`` in the
        store, signed with a secret, and name the rank in that key's list."""
        with open(req["path"], "rb") as fh:
            data = fh.read()
        what = str(req.get("key") or "doc")
        key = f"{what}/{self.rank}"
        self.store.set(key, self._seal(key, data))
        self.store.append("arrived" if what == "doc" else f"{what}_arrived", f"{self.rank},")
        return {"bytes": len(data)}

    def _listed(self, key: str, what: str) -> collections.Counter:
        """How often each rank in range is named in the list ``key``.  A list flooded far beyond
        what the ranks can have written is not read: each rank's ``what/<rank>`` is looked up."""
        cap = 8 * self.world + 4096
        raw = b""
        if key not in self.flooded:
            try:
                raw = self._read(key, cap) or b""
            except TooLarge:
                self.flooded.add(key)
                self._forget(key)
        if key in self.flooded:
            tick = int(time.monotonic())   # (a refused document is then fetched again once a second)
            present = self._exist([f"{what}/{r}" for r in range(self.world)])
            return collections.Counter({r: tick for r, here in enumerate(present) if here})
        items = (x.strip() for x in raw.split(b","))
        return collections.Counter(r for r in (int(x) for x in items if x.isdigit() and len(x) < 8) if r < self.world)

    def _hello(self, r: int) -> Optional[str]:
        value = self._read(f"hello/{r}", MAX_NAME, truncate=True)
        return None if value is None else value[:MAX_NAME].decode(errors="replace")

    def _hellos(self, ranks: list[int]) -> dict[int, str]:
        values = self._read_many([f"hello/{r}" for r in ranks], MAX_NAME, truncate=True)
        return {r: v[:MAX_NAME].decode(errors="replace") for r, v in zip(ranks, values) if v}

    def _taken(self, what: str, r: int, value: Any, hello: Optional[str], cap: int) -> bytes:
        """Rank ``r``'s ``what`` (JSON text) from its value as read, when it can be taken;
        ValueError says why not."""
        if hello is None:
            raise ValueError("sent a document without saying hello")
        if isinstance(value, TooLarge):
            self._forget(f"{what}/{r}")
            raise value
        if value is None:
            raise ValueError("its value went away")
        data = self._open(f"{what}/{r}", value)
        data = inflate(data, MAX_DOC) if data[:1] == b"\x78" else data
        if len(data) > cap:
            raise ValueError(f"larger than {_size(cap)}")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not a document ({str(exc)[:80]})") from None
        if not isinstance(doc, dict) or doc.get("rank") != r or doc.get("node", hello) != hello:
            got = (doc.get("rank"), doc.get("node")) if isinstance(doc, dict) else (None, None)
            raise ValueError(f"its envelope (rank {str(got[0])[:12]}, node {str(got[1])[:40]!r}) does not match "
                             f"its hello (rank {r}, node {hello[:40]!r})")
        if what == "dig":
            challenge = doc.get("challenge")
            if not isinstance(challenge, str) or not CHALLENGE.fullmatch(challenge):
                raise ValueError("its digests carry no challenge")
            self.challenges[r] = challenge
        return data

    def _document(self, what: str, r: int) -> bytes:
        """Rank ``r``'s document (JSON text) when it can be taken; ValueError says why not."""
        hello = self._hello(r)
        value: Any = None
        if hello is not None:
            value = self._read_many([f"{what}/{r}"], MAX_SMALL if what == "probe" else MAX_SENT)[0]
        return self._taken(what, r, value, hello, MAX_DOC)

    def op_collect(self, req: dict) -> dict:
        """Rank 0: wait until every rank's document (``key``: ``doc`` or ``probe``) is in, or those of
        ``ranks`` when given, or the deadline passes; write them to files.  A rank counts once its
        document can be taken; one that cannot is fetched again when the rank (or anyone) names it
        in the list once more, and is reported with why (``bad``)."""
        deadline = self.started + float(req["deadline_s"])
        out, what = req["out_dir"], str(req.get("key") or "doc")
        listing = "arrived" if what == "doc" else f"{what}_arrived"
        wanted = None if req.get("ranks") is None else {int(r) for r in req["ranks"]}
        files: dict = {}
        bad: dict = {}
        seen: collections.Counter = collections.Counter()
        while True:
            for r, count in self._listed(listing, what).items():
                if r in files or seen[r] >= count or (wanted is not None and r not in wanted):
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
            if wanted is None and len(files) >= self.world or wanted is not None and wanted <= set(files) | set(bad):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        names = {r: self._hello(r) for r in self._listed("joined", "hello")} if wanted is None else {}
        return {"files": files, "bad": bad, "joined": {r: n for r, n in names.items() if n is not None},
                "waited_s": round(time.monotonic() - self.started, 3)}

    def op_gather(self, req: dict) -> dict:
        """Rank 0: wait until every rank's digests (or, from a rank of the first protocol, its whole
        document) are in or the deadline passes.  Writes one JSON line per rank that said anything to
        ``out_dir``/gathered.jsonl: {"rank", "hello", and "digests" (the node's digests, JSON), "file"
        (its whole document's file) or "bad" (why it was refused)}; ranks are read in batches, each
        value with its length first."""
        deadline = self.started + float(req["deadline_s"])
        out = req["out_dir"]
        path = os.path.join(out, "gathered.jsonl")
        taken: set[int] = set()
        bad: dict[int, str] = {}
        seen: dict[tuple[str, int], int] = {}
        with open(path, "w", encoding="utf-8") as fh:
            while True:
                fresh = []
                for listing, what in (("dig_arrived", "dig"), ("arrived", "doc")):
                    for r, count in self._listed(listing, what).items():
                        if r not in taken and seen.get((what, r), 0) < count:
                            seen[(what, r)] = count
                            fresh.append((what, r))
                for start in range(0, len(fresh), 512):
                    self._take_batch(fresh[start:start + 512], taken, bad, out, fh)
                if len(taken) >= self.world or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
            said = sorted(set(self._listed("joined", "hello")) - taken)
            for r, why in bad.items():
                if r not in taken:
                    fh.write(json.dumps({"rank": r, "hello": self._hello(r), "bad": why}) + "\n")
            for r, name in self._hellos([r for r in said if r not in bad]).items():
                fh.write(json.dumps({"rank": r, "hello": name}) + "\n")
        return {"path": path, "taken": len(taken), "waited_s": round(time.monotonic() - self.started, 3)}

    def _take_batch(self, batch: list[tuple[str, int]], taken: set[int], bad: dict[int, str], out: str,
                    fh: Any) -> None:
        hellos = self._read_many([f"hello/{r}" for _, r in batch], MAX_NAME, truncate=True)
        values = self._values(batch)
        for (what, r), hello_raw, value in zip(batch, hellos, values):
            if r in taken:
                continue
            hello = None if not hello_raw else hello_raw[:MAX_NAME].decode(errors="replace")
            try:
                data = self._taken(what, r, value, hello, MAX_DIGESTS if what == "dig" else MAX_DOC)
            except ValueError as exc:
                bad[r] = str(exc)
                continue
            bad.pop(r, None)
            taken.add(r)
            head = json.dumps({"rank": r, "hello": hello})[:-1]
            if what == "dig":
                # The digests as sent (JSON that parsed: a line break in it can only be white space).
                fh.write(head + ', "digests": ' + data.decode().replace("\n", " ").replace("\r", " ") + "}\n")
            else:
                path = os.path.join(out, f"doc-{r}.json")
                with open(path, "wb") as doc:
                    doc.write(data)
                fh.write(head + ", " + json.dumps({"file": path})[1:] + "\n")

    def _values(self, batch: list[tuple[str, int]]) -> list[Any]:
        """The values of a batch, digests and whole documents each under its own cap."""
        out: dict[int, Any] = {}
        for what, cap in (("dig", MAX_DIGESTS), ("doc", MAX_SENT)):
            idx = [i for i, (w, _) in enumerate(batch) if w == what]
            for i, v in zip(idx, self._read_many([f"{what}/{batch[i][1]}" for i in idx], cap)):
                out[i] = v
        return [out[i] for i in range(len(batch))]

    def op_publish(self, req: dict) -> dict:
        """Rank 0: publish ``value`` under ``key``; with ``per_rank``, first each rank's own copy under
        ``key/<rank>`` carrying that rank's challenge and whether it is one of ``send`` (the ranks
        asked for their whole document): for every rank in range without a secret, for the ranks
        whose digests verified with one.  ``compact`` is the value as the ranks get it, when it
        differs (the plan: its schedule as a digest)."""
        key = str(req["key"])
        value = req.get("value")
        values: dict[str, bytes] = {}
        if req.get("per_rank"):
            send = {int(r) for r in req.get("send") or ()}
            if self.secret is None:
                ranks = [r for r in range(self.world)]
            else:
                ranks = sorted(self.challenges)
            each: dict = req.get("compact") or value or {}
            for r in ranks:
                mine = dict(each, challenge=self.challenges.get(r), send=r in send)
                values[f"{key}/{r}"] = self._seal(f"{key}/{r}", json.dumps(mine).encode())
            self._set_many(values)
        self.store.set(key, self._seal(key, json.dumps(value).encode()))
        return {"ranks": len(values) if req.get("per_rank") else 0}

    def _set_many(self, values: dict[str, bytes]) -> None:
        """Set every key, a thousand to a request where this torch's store can."""
        keys = list(values)
        many = getattr(self.store, "multi_set", None)
        for start in range(0, len(keys), 1000):
            part = keys[start:start + 1000]
            if many is not None:
                many(part, [values[k] for k in part])
            else:
                for k in part:
                    self.store.set(k, values[k])

    def op_await(self, req: dict) -> dict:
        """The value rank 0 published for this rank under ``key`` (``key/<rank>``, carrying this rank's
        challenge; the plain ``key`` for a rank without one).  A value that is not signed (with a
        secret), or that carries another challenge (another run's), is someone else's: wait on for
        rank 0's own until ``timeout_s``."""
        base, timeout = str(req["key"]), float(req["timeout_s"])
        key = base if self.challenge is None else f"{base}/{self.rank}"
        start = time.monotonic()
        why = f"said nothing ({base})"
        while True:
            left = timeout - (time.monotonic() - start)
            try:
                self.store.wait([key], timedelta(seconds=max(0.1, left)))
                value = self._read(key, MAX_SMALL, truncate=True) or b""
            except Exception:  # noqa: BLE001 - DistStoreError, or the store went away
                waited = time.monotonic() - start
                if waited < timeout - 1:
                    raise RuntimeError(f"rank 0's store went away before it said {base} ({waited:.0f} s)") from None
                raise RuntimeError(f"rank 0 {why} within {timeout:g} s") from None
            try:
                got = json.loads(self._open(key, value[:MAX_SMALL]))
                if self.challenge is not None and (not isinstance(got, dict) or got.get("challenge") != self.challenge):
                    raise ValueError("it does not carry this rank's challenge (another run's)")
                return {"value": got}
            except ValueError as exc:
                if self.secret is None and self.challenge is None:
                    raise RuntimeError(f"rank 0's {base} cannot be used: {exc}") from None
                why = f"sent no {base} that verifies ({exc})"
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
            try:
                acks = self.store.add("acks", 0)
            except Exception:  # noqa: BLE001 - someone garbled the count: wait out the time instead
                time.sleep(POLL_S)
                continue
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


def _descriptors_for(wanted: int) -> Optional[int]:
    """Let this process (it hosts the store: a connection per rank) open ``wanted`` files, as far as
    its hard limit allows; how many it may open now (None where it cannot say)."""
    import resource

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        return None if soft == resource.RLIM_INFINITY else int(soft)
    except (OSError, ValueError):
        return None


def _reader(addr: str, port: int, prefix: str, store: Any, key: str, expected: bytes) -> Optional[Reader]:
    """A :class:`Reader` of this store when it reads back what this rank just wrote (``key``) and an
    unset key as unset; else None (another store, or another wire protocol: values are then read
    whole by torch's store and checked after)."""
    # PrefixStore joins "<prefix>/<key>"; TCPStore puts "/" before every key (TCPStore.cpp, keyPrefix_).
    reader = Reader(addr, port, "/" + prefix + "/")
    try:
        if reader.get_many([key, f"debtorch-unset-{os.urandom(4).hex()}"], len(expected) + 1) == [expected, None]:
            return reader
    except (OSError, ConnectionError, struct.error):
        pass
    reader.close()
    return None


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
