"""``debtorch tune``: training settings for a machine, by rules or by measurement (docs/tune.md).

Exit codes: 0 fine; 1 the measurement failed; 2 bad usage or input (a
workload that cannot be loaded, a budget too small, a destination that
cannot be written, an unreadable facts file, a recorded machine to
measure); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import time
from enum import Enum
from typing import Optional

import typer

from debtorch.cli.shared import (EXIT_INTERRUPTED, EXIT_OK, Device, Emit, Prog, check_python, choose_format,
                                 exit_for, load_facts, open_host)
from debtorch.report import show

prog = Prog("debtorch tune")


class ModelKind(str, Enum):
    conv = "conv"
    transformer = "transformer"
    other = "other"


def tune(
    write: Optional[str] = typer.Option(None, "--write", metavar="PATH", help="Write the settings to a TOML config (atomically)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --write file."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of the table."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter that trains (default: $VIRTUAL_ENV's, else this one)."),
    measure: bool = typer.Option(False, "--measure", help="Decide what rules cannot by short trials on a workload."),
    budget: float = typer.Option(120.0, "--budget", metavar="SECONDS", help="Wall-clock seconds the whole command may take when measuring (at least 20)."),
    workload: str = typer.Option("builtin:cnn", "--workload", metavar="MODULE:FUNCTION", help="What --measure trains (docs/workloads.md)."),
    device: Optional[Device] = typer.Option(None, "--device", help="Tune for cpu or cuda (default: what the machine has)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", metavar="N", help="Samples per optimizer step, all processes together."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", metavar="M", help="Samples per forward pass per process."),
    epochs: Optional[int] = typer.Option(None, "--epochs", metavar="E", help="Run length, for the OneCycleLR schedule."),
    steps: Optional[int] = typer.Option(None, "--steps", metavar="S", help="Run length in optimizer steps, for OneCycleLR."),
    compile_: bool = typer.Option(False, "--compile", help="Use torch.compile (only when asked)."),
    model: Optional[ModelKind] = typer.Option(None, "--model", help="Model kind, when not measuring: conv allows channels_last."),
    nproc: Optional[int] = typer.Option(None, "--nproc", metavar="N", help="Processes per machine (default: one per usable GPU)."),
    emit: Optional[Emit] = typer.Option(None, "--emit", help="env: print shell exports and the torchrun line."),
    facts_file: Optional[str] = typer.Option(None, "--facts", metavar="FILE", help="Tune for saved facts (debtorch facts --json), rules only."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Tune for a machine recorded with 'debtorch facts --record DIR', rules only."),
) -> None:
    """Training settings for this machine, each with its reason; --write saves them for debtorch.load()."""
    started = time.monotonic()  # --budget counts from here: reading the machine is part of it
    from debtorch.tune import config, rules  # defer: the tuner, its worker and tomlkit, only for this command
    from debtorch.tune import run as tuning  # defer: as above
    from debtorch.tune.measure import MIN_BUDGET_S, MeasureError, MeasureOptions  # defer: as above
    from debtorch.report.progress import TrialsBar  # defer: as above
    from debtorch.report.tune import TuneView  # defer: as above

    fmt = choose_format(prog, json_out, emit)
    elsewhere = "--facts" if facts_file else "--host" if replay else None
    if facts_file and replay:
        prog.fail("use only one of --facts and --host")
    if measure and elsewhere:
        prog.fail(f"{elsewhere} tunes for another machine by rules; --measure needs this one")
    if force and not write:
        prog.fail("--force only applies to --write")
    if measure and budget <= 0:
        prog.fail(f"--budget must be a positive number of seconds (got {budget:g})")
    if measure and budget < MIN_BUDGET_S:  # before the facts: probing the interpreter takes seconds
        prog.fail(f"--budget {budget:g} is too small to measure anything; give at least {MIN_BUDGET_S:g} seconds")
    if nproc is not None and nproc < 1:
        prog.fail(f"--nproc must be >= 1 (got {nproc})")
    if epochs is not None and steps is not None:
        prog.fail("give --epochs or --steps, not both")
    check_python(prog, python, elsewhere=bool(elsewhere))
    if write:
        try:
            config.check_destination(write, force)  # before minutes of measuring
        except config.ConfigError as exc:
            prog.fail(str(exc))

    request = rules.Request(device=device.value if device else None, global_batch=global_batch,
                            micro_batch=micro_batch, epochs=epochs, steps=steps, compile=compile_,
                            model=model.value if model else None, nproc=nproc)
    options = MeasureOptions(workload=workload, budget_s=budget, python=python, started=started) if measure else None
    host = None if facts_file else open_host(prog, replay)
    bar = TrialsBar() if measure else contextlib.nullcontext()
    try:
        facts = load_facts(prog, facts_file) if facts_file else tuning.read_facts(host, python)
        with bar:
            tuned = tuning.tune(facts, request, host, options, on_trial=bar.on_trial if measure else None)
    except rules.RequestError as exc:
        prog.fail(str(exc))
    except MeasureError as exc:
        prog.fail(str(exc) if exc.user_input else f"measurement failed: {exc}", exit_for(exc))
    except KeyboardInterrupt:
        # Here, not left to typer: click 8.1 (Debian 12) would say "Aborted!" and exit 1, "failed".
        prog.fail("interrupted; nothing written" if write else "interrupted", EXIT_INTERRUPTED)
    finally:
        if host is not None:
            host.close()
    show(TuneView(tuned, settings=not write), fmt)
    if write:
        try:
            tuned.write(write, force)
        except config.ConfigError as exc:
            prog.fail(str(exc))
        prog.note(f"wrote {write} ({tuned.rec.settings.short()}; chosen by {tuned.rec.chosen_by})")
    raise typer.Exit(EXIT_OK)
