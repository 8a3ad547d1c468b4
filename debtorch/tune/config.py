"""The config file ``debtorch tune --write`` writes and training code loads.

One TOML file: every setting under a table, its reason as a comment above
it, environment hints, a fingerprint of the machine it was tuned on, and how
it was chosen.  docs/tune.md lists every key.

Writing uses tomlkit (python3-tomlkit in Debian 12 is 0.11.7: only its old
API is used) and :mod:`debtorch.outputs` (atomic: a temporary file created
exclusively in the same directory, then ``os.link``, which never replaces an
existing file, or, with ``force``, ``os.replace`` over a regular file only).
Loading uses the standard library's tomllib, then checks
every key: an unknown key or a bad value is one line naming the file, the
line and the key.  Nothing in a config file is ever executed or imported.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from debtorch import __version__, inputs, outputs
from debtorch.train import sim
from debtorch.train.settings import LR_SCHEDULES, PRECISIONS, START_METHODS, Settings

SCHEMA_VERSION = 1

# Settings field -> the table it lives in.  The order is the file's order.
TABLES = {
    "loader": ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "start_method"),
    "compute": ("precision", "tf32", "cudnn_benchmark", "channels_last", "fused_optimizer", "compile",
                "non_blocking", "threads"),
    "distributed": ("nproc", "backend"),
    "batch": ("micro_batch", "accumulation_steps"),
    "schedule": ("lr_schedule", "max_lr", "pct_start"),
}
TABLE_OF = {name: table for table, names in TABLES.items() for name in names}
SCHEDULE_EXTRA = ("total_steps", "epochs")  # run length, beside the settings in [schedule]
TUNED_KEYS = ("by", "date", "debtorch_version", "device", "workload", "budget_s")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# What a setting left out of the file (None) means.
UNSET = {
    "prefetch_factor": "PyTorch's default, 2 batches per worker",
    "start_method": "the platform's default",
    "threads": "PyTorch's default",
    "backend": "no DDP",
    "micro_batch": "the training script's own batch size",
    "max_lr": "the optimizer's learning rate",
}
TOP_LEVEL = ("schema_version",) + tuple(TABLES) + ("limits", "env", "tuned", "fingerprint")


class ConfigError(Exception):
    """A config file cannot be used; ``str()`` is one line for the user."""


@dataclass
class ConfigFile:
    """What a config file holds, checked.  Torch-free."""

    settings: Settings
    env: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)
    tuned: dict = field(default_factory=dict)
    total_steps: Optional[int] = None
    epochs: Optional[int] = None
    path: Optional[str] = None
    oversubscribe: bool = False   # [limits]: tune was told --oversubscribe (a record: only a loader lifts the bound)

    @property
    def device(self) -> str:
        return self.tuned.get("device", "cpu")


# ---------------------------------------------------------------------------
# Values: each checker returns an error (without the key) or None.


def _show(v: Any) -> str:
    """A value as the error message quotes it: TOML-like, one line, short."""
    if isinstance(v, bool):
        s = "true" if v else "false"
    elif isinstance(v, str):
        s = json.dumps(v, ensure_ascii=False)
    elif isinstance(v, (int, float)):
        s = repr(v)
    elif isinstance(v, dict):
        s = "a table"
    elif isinstance(v, list):
        s = "an array"
    else:
        s = str(v)
    s = s.replace("\n", "\\n").replace("\r", "\\r")
    return s if len(s) <= 60 else s[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _int_range(lo: int, hi: int) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        return None if _is_int(v) and lo <= v <= hi else f"must be an integer from {lo} to {hi}"
    return check


def _bool(v: Any) -> Optional[str]:
    return None if isinstance(v, bool) else "must be true or false"


def _choice(*choices: str) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        return None if isinstance(v, str) and v in choices else f"must be one of {', '.join(choices)}"
    return check


def _positive(hi: float) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        return None if _is_num(v) and 0 < v <= hi else f"must be a number > 0 and at most {hi:g}"
    return check


def _fraction(v: Any) -> Optional[str]:
    return None if _is_num(v) and 0 < v < 1 else "must be a number between 0 and 1"


def _text(v: Any) -> Optional[str]:
    if not isinstance(v, str):
        return "must be a string"
    if any(c in v for c in "\n\r\x00"):
        return "must be one line"
    return None


def _device(v: Any) -> Optional[str]:
    """cpu, cuda, or a simulated accelerator's full spec (as tune writes it)."""
    if v in ("cpu", "cuda"):
        return None
    try:
        sim.parse(v)
    except (ValueError, TypeError):
        return 'must be "cpu", "cuda" or a sim:RATE,launch=...,gbps=...,ahead=...,sync=... spec'
    return None


def _text_list(v: Any) -> Optional[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return "must be an array of strings"
    return None


# ---------------------------------------------------------------------------
# Bounds (docs/tune.md, "Bounds"): every number has a range a training run can use.
# Workers, threads and processes are also bounded by the machine that runs them:
# at most MACHINE_FACTOR times its usable CPUs (never below MACHINE_FLOOR), all
# processes together (processes x (1 + workers)) included, so that a typo or a
# hostile file cannot start a storm of processes.  Only the code or command line that
# loads a file lifts the machine's bound (``debtorch.load(path, oversubscribe=True)``,
# verify-train --oversubscribe), never PROCESS_MAX; ``oversubscribe = true`` in [limits]
# records that tune was told so, and lifts nothing by itself.  Every integer fits a signed 64-bit TOML integer.

COUNT_MAX = 2**31 - 1     # batches, steps, epochs: what a 32-bit counter in any loader or schedule holds
PROCESS_MAX = 65536       # workers, threads or processes on one machine, even deliberately
PREFETCH_MAX = 256        # batches ahead per worker: each one is held in memory
MAX_LR = 1000.0
BUDGET_MAX_S = 7 * 24 * 3600.0
MACHINE_FACTOR = 4
MACHINE_FLOOR = 32
MACHINE_BOUND = ("num_workers", "threads", "nproc")


def machine_limit(cpus: int) -> int:
    """The most workers, threads or processes (each, and all processes together) a machine with
    ``cpus`` usable CPUs is asked to run without ``oversubscribe``."""
    return max(MACHINE_FLOOR, MACHINE_FACTOR * max(1, int(cpus)))


def machine_problem(values: dict, cpus: Optional[int]) -> Optional[tuple]:
    """(key, message) when ``values`` (settings fields) ask more of a machine with ``cpus``
    usable CPUs than :func:`machine_limit`; None when they fit (or ``cpus`` is unknown)."""
    if not cpus:
        return None
    limit = machine_limit(cpus)
    why = f"at most {limit} here: {MACHINE_FACTOR} x {cpus} usable CPUs"
    for key in MACHINE_BOUND:
        v = values.get(key)
        if _is_int(v) and v > limit:
            return key, f"{v} is more than this machine can run ({why})"
    nproc, workers = values.get("nproc") or 1, values.get("num_workers") or 0
    if _is_int(nproc) and _is_int(workers) and nproc * (1 + workers) > limit:
        return "num_workers", (f"{nproc} process(es) x (1 + {workers} workers) = {nproc * (1 + workers)} processes, "
                               f"more than this machine can run ({why})")
    return None


OVERSUBSCRIBE_HINT = ("load it with debtorch.load(..., oversubscribe=True) or verify-train --oversubscribe "
                      "to allow it deliberately")


CHECKS: dict[str, Callable[[Any], Optional[str]]] = {
    "num_workers": _int_range(0, PROCESS_MAX),
    "pin_memory": _bool,
    "prefetch_factor": _int_range(1, PREFETCH_MAX),
    "persistent_workers": _bool,
    "start_method": _choice(*START_METHODS),
    "precision": _choice(*PRECISIONS),
    "tf32": _bool,
    "cudnn_benchmark": _bool,
    "channels_last": _bool,
    "fused_optimizer": _bool,
    "compile": _bool,
    "non_blocking": _bool,
    "threads": _int_range(1, PROCESS_MAX),
    "nproc": _int_range(1, PROCESS_MAX),
    "backend": _choice("nccl", "gloo"),
    "micro_batch": _int_range(1, COUNT_MAX),
    "accumulation_steps": _int_range(1, COUNT_MAX),
    "lr_schedule": _choice(*LR_SCHEDULES),
    "max_lr": _positive(MAX_LR),
    "pct_start": _fraction,
    "total_steps": _int_range(1, COUNT_MAX),
    "epochs": _int_range(1, COUNT_MAX),
}
LIMITS_CHECKS = {"oversubscribe": _bool}
TUNED_CHECKS = {
    "by": _choice("rules", "measured"),
    "date": _text,
    "debtorch_version": _text,
    "device": _device,
    "workload": _text,
    "budget_s": _positive(BUDGET_MAX_S),
}
FINGERPRINT_CHECKS = {
    "arch": _text, "cpu_model": _text, "usable_cpus": _int_range(1, COUNT_MAX), "cpu_bf16": _text_list, "gpus": _text_list,
    "driver": _text, "python": _text, "torch": _text, "torch_cuda": _text,
}


# ---------------------------------------------------------------------------
# Where a key is: tomllib gives no positions, so find the key's line in the text.

_SEGMENT = re.compile(r'\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*')


def _split_key(text: str) -> Optional[list]:
    """'a."b.c".d' -> ['a', 'b.c', 'd']; None when ``text`` is not a key."""
    parts, pos = [], 0
    while True:
        m = _SEGMENT.match(text, pos)
        if not m:
            return None
        seg = m.group(1)
        if seg[0] == '"':
            try:
                seg = json.loads(seg)
            except ValueError:
                seg = seg[1:-1]
        elif seg[0] == "'":
            seg = seg[1:-1]
        parts.append(seg)
        pos = m.end()
        if pos == len(text):
            return parts
        if text[pos] != ".":
            return None
        pos += 1


def key_lines(text: str) -> dict:
    """{dotted key: first line number} for tables and keys in TOML ``text``.

    A scanner, not a parser: good enough to point at a line, never raises.
    Keys inside inline tables point at the inline table's line.
    """
    lines: dict = {}
    table: list = []
    in_multiline: Optional[str] = None
    for no, line in enumerate(str(text).splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = re.match(r"^\[\[?\s*(.*?)\s*\]\]?\s*(#.*)?$", stripped)
        if m and not re.match(r"^\[\s*[^\]]*=", stripped):
            parts = _split_key(m.group(1))
            if parts is not None:
                table = parts
                lines.setdefault(".".join(table), no)
                continue
        key, eq, rest = stripped.partition("=")
        if not eq:
            continue
        parts = _split_key(key.strip())
        if parts is None:
            continue
        full = table + parts
        for i in range(len(table) + 1, len(full) + 1):
            lines.setdefault(".".join(full[:i]), no)
        for quote in ('"""', "'''"):
            if rest.count(quote) % 2 == 1:
                in_multiline = quote
                break
    return lines


def line_of(lines: dict, dotted: str) -> int:
    """The line of ``dotted``, else of its nearest parent, else 1."""
    parts = dotted.split(".")
    while parts:
        no = lines.get(".".join(parts))
        if no is not None:
            return no
        parts.pop()
    return 1


# ---------------------------------------------------------------------------
# Loading


def load_config(path: str, cpus: Optional[int] = None) -> ConfigFile:
    """Read and check a config file; raise :class:`ConfigError` (one line) when it cannot be used.

    ``cpus``: the usable CPUs of the machine that will run it, which bound workers,
    threads and processes (see :func:`machine_problem`); None checks the ranges only."""
    try:
        text = inputs.read_text(path, inputs.MAX_CONFIG, what="a debtorch config")
    except inputs.InputError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(text, path, cpus)


def parse_config(text: str, name: str = "debtorch.toml", cpus: Optional[int] = None) -> ConfigFile:
    """Check config ``text``; ``name`` is the file name used in error messages; ``cpus`` as for
    :func:`load_config`."""
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{name}: not valid TOML (nested too deeply)") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer of more digits than int() takes
        msg = str(exc).replace("\n", " ")
        m = re.search(r"\s*\(at line (\d+), column \d+\)\s*$", msg)
        line = int(m.group(1)) if m else 1
        if m:
            msg = msg[: m.start()]
        elif re.search(r"\(at end of document\)\s*$", msg):
            line = max(1, len(text.splitlines()))
            msg = re.sub(r"\s*\(at end of document\)\s*$", "", msg)
        raise ConfigError(f"{name}:{line}: not valid TOML: {msg}") from None
    lines = key_lines(text)

    def fail(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{name}:{line_of(lines, key)}: {key}: {msg}")

    for key in doc:
        if key not in TOP_LEVEL:
            raise fail(key, f"unknown key (known: {', '.join(TOP_LEVEL)})")
    version = doc.get("schema_version")
    if version is None:
        raise ConfigError(f"{name}:1: schema_version: missing; was this written by 'debtorch tune --write'?")
    if not _is_int(version) or version != SCHEMA_VERSION:
        raise fail("schema_version", f"this debtorch reads {SCHEMA_VERSION} (got {_show(version)})")

    values: dict = {}
    extra: dict = {}
    for table, names in TABLES.items():
        section = doc.get(table, {})
        if not isinstance(section, dict):
            raise fail(table, f"must be a table (got {_show(section)})")
        allowed = names + (SCHEDULE_EXTRA if table == "schedule" else ())
        for key, value in section.items():
            dotted = f"{table}.{key}"
            if key not in allowed:
                hint = f"; it belongs in [{TABLE_OF[key]}]" if key in TABLE_OF else ""
                raise fail(dotted, f"unknown key (known: {', '.join(allowed)}){hint}")
            err = CHECKS[key](value)
            if err:
                raise fail(dotted, f"{err} (got {_show(value)})")
            (values if key in names else extra)[key] = value

    limits = _checked_table(doc, "limits", LIMITS_CHECKS, fail)
    oversubscribe = bool(limits.get("oversubscribe"))
    bad = machine_problem(values, cpus)   # the file's own [limits] never lifts it: only its loader may
    if bad:
        key, msg = bad
        raise fail(f"{TABLE_OF[key]}.{key}", f"{msg}; {OVERSUBSCRIBE_HINT}")
    settings = Settings(**values)
    for problem in settings.validate():
        # Settings.validate names the field first: "prefetch_factor needs num_workers > 0".
        fname = problem.split()[0]
        dotted = f"{TABLE_OF.get(fname, 'loader')}.{fname}"
        raise fail(dotted, problem[len(fname):].strip())

    env = _checked_table(doc, "env", None, fail)
    tuned = _checked_table(doc, "tuned", TUNED_CHECKS, fail)
    fingerprint = _checked_table(doc, "fingerprint", FINGERPRINT_CHECKS, fail)
    return ConfigFile(settings=settings, env=env, fingerprint=fingerprint, tuned=tuned,
                      total_steps=extra.get("total_steps"), epochs=extra.get("epochs"), path=name,
                      oversubscribe=oversubscribe)


def _checked_table(doc: dict, table: str, checks: Optional[dict], fail) -> dict:
    section = doc.get(table, {})
    if not isinstance(section, dict):
        raise fail(table, f"must be a table (got {_show(section)})")
    out = {}
    for key, value in section.items():
        dotted = f"{table}.{key}"
        if checks is None:  # [env]: NAME = "value"
            if not ENV_NAME.match(key):
                raise fail(dotted, "not an environment variable name (A-Z, 0-9, _)")
            err = _text(value)
        else:
            if key not in checks:
                raise fail(dotted, f"unknown key (known: {', '.join(checks)})")
            err = checks[key](value)
        if err:
            raise fail(dotted, f"{err} (got {_show(value)})")
        out[key] = value
    return out


# ---------------------------------------------------------------------------
# Writing


def tuned_table(by: str, device: str, workload: Optional[str] = None, budget_s: Optional[float] = None,
                now: Optional[_dt.datetime] = None) -> dict:
    """How the settings were chosen, for the ``[tuned]`` table."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    out = {"by": by, "date": now.replace(microsecond=0).isoformat(), "debtorch_version": __version__,
           "device": device}
    if workload:
        out["workload"] = workload
    if budget_s:
        out["budget_s"] = float(budget_s)
    return out


def render_config(rec, fingerprint: dict, tuned: dict) -> str:
    """The TOML text for recommendation ``rec`` (a :class:`~debtorch.tune.rules.Recommendation`)."""
    import tomlkit

    doc = tomlkit.document()
    doc.add(tomlkit.comment("debtorch training settings, written by `debtorch tune`."))
    doc.add(tomlkit.comment("Load in training code: cfg = debtorch.load(\"this file\")  (docs/runtime.md)."))
    doc.add(tomlkit.comment("Above each setting: the rule (docs/tune.md) or the measurement that chose it."))
    doc.add(tomlkit.comment("Edit freely: loading checks every key and value."))
    doc.add("schema_version", SCHEMA_VERSION)
    values = rec.settings.to_dict()
    for table, names in TABLES.items():
        t = tomlkit.table()
        for name in names:
            reason = rec.reasons.get(name)
            if reason is not None:
                t.add(tomlkit.comment(str(reason)))
            value = values[name]
            if value is None:
                t.add(tomlkit.comment(f"{name}: not set, meaning {UNSET.get(name, 'the default')}"))
            else:
                t.add(name, value)
        if table == "batch" and rec.global_batch:
            t.add(tomlkit.comment(f"global batch: {rec.global_batch} samples per optimizer step"))
        if table == "schedule":
            if rec.total_steps:
                t.add(tomlkit.comment("optimizer steps in the run: cfg.scheduler() uses it unless given"))
                t.add("total_steps", rec.total_steps)
            if rec.epochs:
                t.add(tomlkit.comment("epochs in the run: cfg.scheduler(opt, steps_per_epoch=len(loader)) uses it"))
                t.add("epochs", rec.epochs)
        doc.add(table, t)
    if getattr(rec, "oversubscribe", False):
        t = tomlkit.table()
        t.add(tomlkit.comment(f"asked (--oversubscribe): beyond what this machine runs well ({MACHINE_FACTOR} x its "
                              "usable CPUs); load with debtorch.load(path, oversubscribe=True)"))
        t.add("oversubscribe", True)
        doc.add("limits", t)
    env = tomlkit.table()
    env.add(tomlkit.comment("Environment for job scripts (`debtorch tune --emit env`); never applied by loading."))
    for name in sorted(rec.env):
        env.add(tomlkit.comment(str(rec.env_reasons[name])))
        env.add(name, rec.env[name])
    doc.add("env", env)
    t = tomlkit.table()
    for note in rec.notes:
        t.add(tomlkit.comment(f"note: {note}"))
    for key, value in tuned.items():
        t.add(key, value)
    doc.add("tuned", t)
    fp = tomlkit.table()
    fp.add(tomlkit.comment("The machine these settings were tuned on; the runtime warns when it differs."))
    for key, value in fingerprint.items():
        fp.add(key, value)
    doc.add("fingerprint", fp)
    return tomlkit.dumps(doc)


def check_destination(path: str, force: bool = False) -> str:
    """Refuse a destination :func:`write_atomic` would refuse; return its directory.

    Raises :class:`ConfigError` (one line).  ``debtorch tune`` calls it before
    measuring, so that minutes of trials are not lost to a bad destination.
    """
    try:
        return outputs.check_destination(path, force)
    except outputs.OutputError as exc:
        raise ConfigError(str(exc)) from None


def write_atomic(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`debtorch.outputs.write_atomic`);
    never replace a file without ``force``, nor anything but a regular file.  Raises :class:`ConfigError`."""
    try:
        outputs.write_atomic(path, text, force)
    except outputs.OutputError as exc:
        raise ConfigError(str(exc)) from None


def write_config(path: str, rec, fingerprint: dict, tuned: dict, force: bool = False) -> str:
    """Render and write a config atomically; return the text written."""
    text = render_config(rec, fingerprint, tuned)
    # What we write must load, on the machine it was tuned for: a bug here, or a number no
    # config may hold, must not reach the user's file.
    parse_config(text, path, None if getattr(rec, "oversubscribe", False) else fingerprint.get("usable_cpus"))
    write_atomic(path, text, force=force)
    return text
