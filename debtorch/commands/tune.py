"""``debtorch tune``: training settings for this machine, by rules or by measurement.

Thin: parse options, call :mod:`debtorch.tune`, render, choose the exit code.
Exit codes: 0 fine; 1 the measurement failed; 2 bad usage or input (a
workload that cannot be loaded, a budget too small, a destination that
cannot be written, an unreadable facts file); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from enum import Enum
from typing import Optional

import typer

from debtorch.commands import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Device, fail
from debtorch.machine import Machine


class Emit(str, Enum):
    env = "env"


class ModelKind(str, Enum):
    conv = "conv"
    transformer = "transformer"
    other = "other"


def _fail(message: str, code: int = EXIT_USAGE) -> "typer.Exit":
    fail("debtorch tune", message, code)


def _check_destination(path: str, force: bool) -> None:
    """Refuse early (before minutes of measuring) what the final write would refuse."""
    from debtorch.tune.config import ConfigError, check_destination

    try:
        directory = check_destination(path, force)
    except ConfigError as exc:
        _fail(str(exc))
    if not os.access(directory, os.W_OK | os.X_OK):
        _fail(f"{path}: cannot write: directory {directory} is read-only for this user")


def _facts(facts_file: Optional[str], python: Optional[str]) -> dict:
    from debtorch import facts as facts_mod

    if facts_file:
        try:
            return facts_mod.load(facts_file)
        except facts_mod.FactsFileError as exc:
            _fail(f"--facts {exc}")
    from debtorch.host import LiveHost

    host = LiveHost()
    try:
        return facts_mod.collect(host, facts_mod.Options(python=python,
                                                         sections=("os", "cpu", "memory", "nvidia", "python", "env")))
    finally:
        host.close()


def _progress():
    """A rich progress bar on stderr for the measurement, and its trial callback."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        # Not even a disabled Progress: rich 13.3 (Debian 12) still writes a newline when it stops.
        return contextlib.nullcontext(), lambda trial, spent, budget: None
    progress = Progress(TextColumn("[bold]measuring[/] {task.description}"), BarColumn(),
                        TextColumn("{task.completed:.0f}/{task.total:.0f} s"), TimeElapsedColumn(),
                        console=console, transient=True)
    task = progress.add_task("starting", total=1.0)

    def on_trial(trial, spent: float, budget: float) -> None:
        got = f"{trial.samples_per_s:.1f} samples/s" if trial.samples_per_s is not None else "failed"
        progress.update(task, total=budget, completed=min(spent, budget),
                        description=f"{trial.phase}: {trial.settings.short()} -> {got}")

    return progress, on_trial


def tune(
    write: Optional[str] = typer.Option(None, "--write", metavar="PATH", help="Write the settings to a TOML config (atomically)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --write file."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of the table."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter that trains (default: $VIRTUAL_ENV's, else this one)."),
    measure: bool = typer.Option(False, "--measure", help="Decide what rules cannot by short trials on a workload."),
    budget: float = typer.Option(120.0, "--budget", metavar="SECONDS", help="Time the whole measurement may take."),
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
) -> None:
    """Training settings for this machine, each with its reason; --write saves them for debtorch.load()."""
    from debtorch.tune import config, fingerprint, report, rules

    if facts_file and measure:
        _fail("--facts tunes for another machine by rules; --measure needs this one")
    if emit is not None and json_out:
        _fail("--emit env and --json print different things; choose one")
    if force and not write:
        _fail("--force only applies to --write")
    if measure and budget <= 0:
        _fail(f"--budget must be a positive number of seconds (got {budget:g})")
    if measure:
        from debtorch.tune.measure import MIN_BUDGET_S

        if budget < MIN_BUDGET_S:  # before the facts: probing the interpreter takes seconds
            _fail(f"--budget {budget:g} is too small to measure anything; give at least {MIN_BUDGET_S:g} seconds")
    if nproc is not None and nproc < 1:
        _fail(f"--nproc must be >= 1 (got {nproc})")
    if epochs is not None and steps is not None:
        _fail("give --epochs or --steps, not both")
    if write:
        _check_destination(write, force)

    facts = _facts(facts_file, python)
    request = rules.Request(device=device.value if device else None, global_batch=global_batch,
                            micro_batch=micro_batch, epochs=epochs, steps=steps, compile=compile_,
                            model=model.value if model else None, nproc=nproc)
    try:
        rec = rules.recommend(facts, request)
    except rules.RequestError as exc:
        _fail(str(exc))
    fp = fingerprint.from_facts(facts)

    result = None
    if measure:
        from debtorch.tune.measure import MeasureError, MeasureOptions, MeasureUsageError, measure as run_measure

        if device is not None and device.value == "cuda" and not Machine.from_facts(facts).compute_gpus:
            _fail("--device cuda --measure needs a GPU on this machine; the facts list none")
        progress, on_trial = _progress()
        try:
            with progress:
                result = run_measure(rec, facts, MeasureOptions(workload=workload, budget_s=budget, python=python),
                                     on_trial=on_trial)
        except MeasureUsageError as exc:
            _fail(str(exc), EXIT_USAGE)
        except MeasureError as exc:
            _fail(f"measurement failed: {exc}", EXIT_FAILED)
        except KeyboardInterrupt:
            # Here, not left to typer: click 8.1 (Debian 12) would say "Aborted!" and exit 1, "failed".
            _fail("interrupted; nothing written" if write else "interrupted", EXIT_INTERRUPTED)

    if emit is not None:
        typer.echo(rec.emit_env(), nl=False)
    elif json_out:
        typer.echo(json.dumps(report.to_json(rec, fp, result), indent=2))
    else:
        if result is not None:
            typer.echo("\n".join(report.trials_lines(result)))
        if not write:
            typer.echo("\n".join(report.settings_lines(rec)))
    if write:
        tuned = config.tuned_table("measured" if result is not None else "rules", rec.device,
                                   workload=workload if result is not None else None,
                                   budget_s=budget if result is not None else None)
        try:
            config.write_config(write, rec, fp, tuned, force=force)
        except config.ConfigError as exc:
            _fail(str(exc))
        typer.echo(f"debtorch tune: wrote {write} ({rec.settings.short()}; chosen by {rec.chosen_by})", err=True)
    raise typer.Exit(EXIT_OK)
