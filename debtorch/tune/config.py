"""The config file ``debtorch tune --write`` writes and training code loads (docs/tune.md lists every
key): every setting under a table with its reason as a comment, environment hints, the fingerprint
of the machine it was tuned on, and how it was chosen.  Written with tomlkit (Debian 12's 0.11.7:
only its old API) through :mod:`debtorch.outputs` (atomic, never over a file without ``force``);
loaded with tomllib and checked against :data:`SCHEMA`, every problem one line naming the file, the
line and the key.  Nothing in a config file is ever executed or imported.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from debtorch import inputs, outputs, schema
from debtorch.__about__ import __version__
from debtorch.budget import WEEK_S
from debtorch.host import Host, Unavailable
from debtorch.train.device import CPU, Device
from debtorch.train.settings import COUNT, DEVICES, FIELDS, TABLE_OF, TABLES, UNSET, Settings

if TYPE_CHECKING:   # the rules import this module (the config's bounds): a type only
    from debtorch.tune.rules import Recommendation

SCHEMA_VERSION = 1

# The settings' tables come from their declarations (debtorch.train.settings): TABLES (table -> its fields,
# in the file's order), TABLE_OF (field -> table) and UNSET (what a setting left out means).
SCHEDULE_EXTRA = ("total_steps", "epochs")  # run length, beside the settings in [schedule]
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class ConfigError(Exception):
    """A config file cannot be used; ``str()`` is one line for the user."""


@dataclass
class ConfigFile:
    """What a config file holds, checked.  Torch-free."""

    settings: Settings
    env: dict[str, str] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, Any] = field(default_factory=dict)
    total_steps: Optional[int] = None
    epochs: Optional[int] = None
    path: Optional[str] = None
    oversubscribe: bool = False   # [limits]: tune was told --oversubscribe (a record: only a loader lifts the bound)
    # What the settings were tuned on: the simulated accelerator ([tuned] simulated, or, in a config written
    # before that key existed, a simulation's spec as [tuned] device), else the device (cpu when unsaid).
    tuned_on: Device = CPU

    @property
    def device(self) -> str:
        """The device training code runs these settings on: "cpu" or "cuda" (a config tuned on a
        simulated accelerator: the GPU it stands for)."""
        return self.tuned_on.real_kind

    @property
    def simulated(self) -> Optional[str]:
        """The simulated accelerator the settings were measured on (its full ``sim:`` spec), or None."""
        return str(self.tuned_on) if self.tuned_on.simulated else None

    @property
    def tuned_for(self) -> str:
        """What the settings were tuned on, in words: the simulation's spec, else the device."""
        return str(self.tuned_on)


# ---------------------------------------------------------------------------
# Bounds (docs/tune.md, "Bounds"): besides each number's range (train/settings.FIELDS), workers, threads
# and processes (all together included) are bounded by the machine, at most MACHINE_FACTOR times its
# usable CPUs, so that a typo or a hostile file cannot start a storm of processes.  Only the code or
# command line that loads a file lifts that bound; ``oversubscribe = true`` in [limits] only records it.

BUDGET_MAX_S = WEEK_S
MACHINE_FACTOR = 4
MACHINE_FLOOR = 32
MACHINE_BOUND = ("num_workers", "threads", "nproc")


def machine_limit(cpus: int) -> int:
    """The most workers, threads or processes (each, and all processes together) a machine with
    ``cpus`` usable CPUs is asked to run without ``oversubscribe``."""
    return max(MACHINE_FLOOR, MACHINE_FACTOR * max(1, int(cpus)))


def limit_words(cpus: int) -> str:
    """How :func:`machine_limit` comes out for ``cpus``: '4 x 16 usable CPUs', or '4 x 2 usable CPUs is 8,
    below the floor of 32'."""
    product = MACHINE_FACTOR * max(1, int(cpus))
    words = f"{MACHINE_FACTOR} x {cpus} usable CPUs"
    return words if product >= MACHINE_FLOOR else f"{words} is {product}, below the floor of {MACHINE_FLOOR}"


def machine_problem(values: dict[str, Any], cpus: Optional[int]) -> Optional[tuple[str, str]]:
    """(key, message) when ``values`` (settings fields) ask more of a machine with ``cpus``
    usable CPUs than :func:`machine_limit`; None when they fit (or ``cpus`` is unknown)."""
    if not cpus:
        return None
    limit = machine_limit(cpus)
    why = f"at most {limit} here: {limit_words(cpus)}"
    for key in MACHINE_BOUND:
        v = values.get(key)
        if isinstance(v, int) and schema.is_int(v) and v > limit:
            return key, f"{v} is more than this machine can run ({why})"
    nproc, workers = values.get("nproc") or 1, values.get("num_workers") or 0
    if schema.is_int(nproc) and schema.is_int(workers) and nproc * (1 + workers) > limit:
        return "num_workers", (f"{nproc} process(es) x (1 + {workers} workers) = {nproc * (1 + workers)} processes, "
                               f"more than this machine can run ({why})")
    return None


def usable_cpus(host: Host) -> Optional[int]:
    """The CPUs this process may use (its affinity), which bound a config's workers and processes."""
    try:
        return len(host.affinity()) or None
    except Unavailable:
        return None


OVERSUBSCRIBE_HINT = ("load it with debtorch.load(..., oversubscribe=True) or verify-train --oversubscribe "
                      "to allow it deliberately")


def _is_sim_spec(v: object) -> bool:
    """A simulated accelerator's full spec, as tune writes it."""
    try:
        return isinstance(v, str) and Device.parse(v).simulated
    except ValueError:
        return False


def _is_device(v: object) -> bool:
    """cpu, cuda, or (a config written before ``simulated``) a simulated accelerator's full spec."""
    return v in DEVICES or _is_sim_spec(v)


def _tuned_on(tuned: dict[str, Any]) -> Device:
    """The device a checked ``[tuned]`` table says the settings were tuned on (``ConfigFile.tuned_on``)."""
    return Device.parse(tuned.get("simulated") or tuned.get("device") or "cpu")


DEVICE = schema.Value(('"cpu", "cuda" or a sim:RATE,launch=...,gbps=...,ahead=...,sync=... spec', _is_device))
SIM_SPEC = schema.Value(("a sim:RATE,launch=...,gbps=...,ahead=...,sync=... spec", _is_sim_spec))
TEXT = schema.text(max_len=4096, one_line=True)
TEXTS = schema.List(TEXT, max_len=4096, expect="an array of strings")
SCHEMA: dict[str, schema.Spec] = {
    "schema_version": schema.ANY,        # checked first, with its own words
    **{table: {k: FIELDS.get(k, COUNT) for k in names + (SCHEDULE_EXTRA if table == "schedule" else ())}
       for table, names in TABLES.items()},
    "limits": {"oversubscribe": schema.BOOL},
    "env": schema.Table({"*": TEXT}, keys=("an environment variable name (A-Z, 0-9, _)", ENV_NAME.match)),
    "tuned": {"by": schema.one_of("rules", "measured", "calibrated", "watch"), "date": TEXT, "debtorch_version": TEXT,
              "device": DEVICE, "simulated": SIM_SPEC, "workload": TEXT,
              "budget_s": schema.number(f"a number > 0 and at most {BUDGET_MAX_S:g}", lambda v: 0 < v <= BUDGET_MAX_S)},
    "fingerprint": {"arch": TEXT, "cpu_model": TEXT, "usable_cpus": COUNT, "cpu_bf16": TEXTS, "gpus": TEXTS,
                    "driver": TEXT, "python": TEXT, "torch": TEXT, "torch_cuda": TEXT},
}
ORDER = {key: i for i, key in enumerate(SCHEMA)}      # the order problems are looked for in


# ---------------------------------------------------------------------------
# Loading


def load_config(path: str, cpus: Optional[int] = None) -> ConfigFile:
    """Read and check a config file; :class:`ConfigError` (one line) when it cannot be used.  ``cpus``:
    the usable CPUs of the machine that will run it (:func:`machine_problem`); None: the ranges only."""
    try:
        text = inputs.read_text(path, inputs.MAX_CONFIG, what="a debtorch config")
    except inputs.InputError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(text, path, cpus)


def parse_config(text: str, name: str = "debtorch.toml", cpus: Optional[int] = None) -> ConfigFile:
    """Check config ``text``; ``name`` is the file name used in error messages; ``cpus`` as for
    :func:`load_config`."""
    doc = schema.parse_toml(text, name, ConfigError)

    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(schema.place(schema.Invalid(key, problem), name, text))

    version = doc.get("schema_version")
    if version is None:
        raise fail("schema_version", "missing; was this written by 'debtorch tune --write'?")
    if not schema.is_int(version) or version != SCHEMA_VERSION:
        raise fail("schema_version", f"this debtorch reads {SCHEMA_VERSION} (got {schema.show(version)})")
    try:   # unknown tables first, then the settings, then what records how they were chosen
        schema.check(dict(sorted(doc.items(), key=lambda kv: ORDER.get(kv[0], -1))), SCHEMA)
    except schema.Invalid as exc:
        key = exc.path.rpartition(".")[2]
        hint = f"; it belongs in [{TABLE_OF[key]}]" if exc.problem.startswith("unknown key") and key in TABLE_OF else ""
        raise fail(exc.path, exc.problem + hint) from None
    values = {k: v for table in TABLES for k, v in doc.get(table, {}).items() if k in TABLE_OF}
    bad = machine_problem(values, cpus)   # the file's own [limits] never lifts it: only its loader may
    if bad:
        raise fail(f"{TABLE_OF[bad[0]]}.{bad[0]}", f"{bad[1]}; {OVERSUBSCRIBE_HINT}")
    settings = Settings(**values)
    for problem in settings.validate():
        raise fail(f"{TABLE_OF[problem.field]}.{problem.field}", problem.text)
    schedule = doc.get("schedule", {})
    tuned = doc.get("tuned", {})
    return ConfigFile(settings=settings, env=doc.get("env", {}), fingerprint=doc.get("fingerprint", {}),
                      tuned=tuned, total_steps=schedule.get("total_steps"), epochs=schedule.get("epochs"), path=name,
                      oversubscribe=bool(doc.get("limits", {}).get("oversubscribe")), tuned_on=_tuned_on(tuned))


# ---------------------------------------------------------------------------
# Writing


def tuned_table(by: str, device: Device, workload: Optional[str] = None, budget_s: Optional[float] = None,
                now: Optional[_dt.datetime] = None) -> dict[str, Any]:
    """How the settings were chosen, for the ``[tuned]`` table: ``device`` the kind of device training
    code runs them on (cpu or cuda; tuned on a simulated accelerator, the GPU it stands for) and
    ``simulated`` the simulation's spec."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    out: dict[str, Any] = {"by": by, "date": now.replace(microsecond=0).isoformat(), "debtorch_version": __version__,
                           "device": device.real_kind}
    if device.simulated:
        out["simulated"] = str(device)
    if workload:
        out["workload"] = workload
    if budget_s:
        out["budget_s"] = float(budget_s)
    return out


def render_config(rec: Recommendation, fingerprint: dict[str, Any], tuned: dict[str, Any]) -> str:
    """The TOML text for recommendation ``rec``: each table a list of comments (strings) and (key, value)
    pairs."""
    import tomlkit

    values = rec.settings.to_dict()
    tables: dict[str, list[Union[str, tuple[str, Any]]]] = {}
    for table, names in TABLES.items():
        items: list[Union[str, tuple[str, Any]]] = []
        for name in names:
            if name in rec.reasons:
                items.append(str(rec.reasons[name]))
            if values[name] is None:
                items.append(f"{name}: not set, meaning {UNSET.get(name, 'the default')}")
            else:
                items.append((name, values[name]))
        tables[table] = items
    if rec.global_batch:
        tables["batch"].append(f"global batch: {rec.global_batch} samples per optimizer step")
    if rec.total_steps:
        tables["schedule"] += ["optimizer steps in the run: cfg.scheduler() uses it unless given",
                               ("total_steps", rec.total_steps)]
    if rec.epochs:
        tables["schedule"] += ["epochs in the run: cfg.scheduler(opt, steps_per_epoch=len(loader)) uses it",
                               ("epochs", rec.epochs)]
    if getattr(rec, "oversubscribe", False):
        tables["limits"] = [f"asked (--oversubscribe): beyond what this machine runs well ({MACHINE_FACTOR} x its "
                            "usable CPUs); load with debtorch.load(path, oversubscribe=True)", ("oversubscribe", True)]
    tables["env"] = ["Environment for job scripts (`debtorch tune --emit env`); never applied by loading."]
    for name in sorted(rec.env):
        tables["env"] += [str(rec.env_reasons[name]), (name, rec.env[name])]
    tables["tuned"] = [f"note: {note}" for note in rec.notes]
    tables["tuned"] += tuned.items()
    tables["fingerprint"] = ["The machine these settings were tuned on; the runtime warns when it differs."]
    tables["fingerprint"] += fingerprint.items()
    doc = tomlkit.document()
    for line in ("debtorch training settings, written by `debtorch tune`.",
                 "Load in training code: cfg = debtorch.load(\"this file\")  (docs/runtime.md).",
                 "Above each setting: the rule (docs/tune.md) or the measurement that chose it.",
                 "Edit freely: loading checks every key and value."):
        doc.add(tomlkit.comment(line))
    doc.add("schema_version", SCHEMA_VERSION)
    for name, items in tables.items():
        t = tomlkit.table()
        for item in items:
            if isinstance(item, str):
                t.add(tomlkit.comment(item))
            else:
                t.add(*item)
        doc.add(name, t)
    return tomlkit.dumps(doc)


def check_destination(path: str, force: bool = False) -> str:
    """Refuse (ConfigError) a destination :func:`write_atomic` would refuse, before minutes of measuring."""
    try:
        return outputs.check_destination(path, force)
    except outputs.OutputError as exc:
        raise ConfigError(str(exc)) from None


def write_atomic(path: str, text: str, force: bool = False) -> None:
    """:func:`debtorch.outputs.write_atomic`, its failure a :class:`ConfigError`."""
    try:
        outputs.write_atomic(path, text, force)
    except outputs.OutputError as exc:
        raise ConfigError(str(exc)) from None


def write_config(path: str, rec: Recommendation, fingerprint: dict[str, Any], tuned: dict[str, Any],
                 force: bool = False) -> str:
    """Render and write a config atomically; return the text written."""
    text = render_config(rec, fingerprint, tuned)
    # What we write must load, on the machine it was tuned for: a bug here, or a number no
    # config may hold, must not reach the user's file.
    parse_config(text, path, None if getattr(rec, "oversubscribe", False) else fingerprint.get("usable_cpus"))
    write_atomic(path, text, force=force)
    return text
