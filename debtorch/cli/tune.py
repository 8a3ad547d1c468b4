"""``debtorch tune``: training settings for a machine, by rules or by measurement (docs/tune.md;
exit codes: docs/cli.md)."""

import contextlib
import time
from enum import Enum
from typing import Optional

import typer

from debtorch.budget import seconds_problem
from debtorch.cli.shared import (
    DEVICE_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Emit,
    Prog,
    check_answered,
    check_python,
    choose_format,
    device_option,
    exit_for,
    given_paths,
    load_facts,
    open_host,
    present,
    redactor,
)

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
    budget: Optional[float] = typer.Option(None, "--budget", metavar="SECONDS", help="Wall-clock seconds the whole command may take when measuring (--measure or --workload; at least 20, default 120)."),
    workload: Optional[str] = typer.Option(None, "--workload", metavar="MODULE:FUNCTION", help="What --measure trains (docs/workloads.md; default builtin:cnn); without --measure, the rules are calibrated on it in seconds."),
    device: Optional[str] = typer.Option(None, "--device", metavar="DEVICE", help=f"Tune for {DEVICE_HELP} (default: what the machine has)."),
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
    from_watch: Optional[str] = typer.Option(None, "--from-watch", metavar="PATH", help="Prescribe loader settings from your job: the JSON lines cfg.watch(loader, json=PATH) wrote (docs/tune.md)."),
    oversubscribe: bool = typer.Option(False, "--oversubscribe", help="Allow --nproc beyond this machine's bound (4 x its usable CPUs); the config says so."),
    redact: bool = typer.Option(False, "--redact", help="Replace host and user names, home paths, serials, UUIDs, MAC and IP addresses in the output."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also the statistics behind --measure's choices (Pocock's boundary, looks)."),
) -> None:
    """Training settings for this machine, each with its reason; --write saves them for debtorch.load()."""
    started = time.monotonic()  # --budget counts from here: reading the machine is part of it
    from debtorch.report.progress import TrialsBar  # defer: as above
    from debtorch.report.tune import TuneView, chosen_by  # defer: as above
    from debtorch.tune import config, rules  # defer: the tuner, its worker and tomlkit, only for this command
    from debtorch.tune import run as tuning  # defer: as above
    from debtorch.tune.measure import MIN_BUDGET_S, MeasureError, MeasureOptions  # defer: as above
    from debtorch.tune.prescribe import WatchError, read_watch  # defer: as above

    fmt = choose_format(prog, json_out, emit)
    given_paths(prog, write=write, python=python, facts=facts_file, host=replay, from_watch=from_watch)
    elsewhere = None   # the option naming another machine, when one does
    if facts_file:
        elsewhere = "--facts"
    elif replay:
        elsewhere = "--host"
    if facts_file and replay:
        prog.fail("use only one of --facts and --host")
    if measure and elsewhere:
        prog.fail(f"{elsewhere} tunes for another machine by rules; --measure needs this one")
    if force and write is None:
        prog.fail("--force only applies to --write")
    if from_watch is not None and (measure or workload is not None):
        prog.fail("--from-watch prescribes from your job's record; --measure and --workload measure a workload here: "
                  "use one")
    calibrate = workload is not None and not measure   # the rules calibrated on a named workload
    if calibrate and elsewhere:
        prog.fail(f"{elsewhere} tunes for another machine by rules; --workload calibrates them on this one")
    if budget is not None and not (measure or calibrate):
        prog.fail("--budget only applies to --measure or --workload (rules alone measure nothing)")
    budget = MeasureOptions.budget_s if budget is None else budget
    problem = seconds_problem("--budget", budget, MIN_BUDGET_S) if (measure or calibrate) else None
    if problem:  # before the facts: probing the interpreter takes seconds
        prog.fail(problem)
    if epochs is not None and steps is not None:
        prog.fail("give --epochs or --steps, not both")
    check_python(prog, python, elsewhere=bool(elsewhere))
    if write is not None:
        with prog.fails_on(config.ConfigError):
            config.check_destination(write, force)  # before minutes of measuring

    watched = None
    if from_watch is not None:
        with prog.fails_on(WatchError):
            watched = read_watch(from_watch)   # untrusted input, checked before the machine is read
    asked = device_option(prog, device)
    request = rules.Request(device=asked or (watched.device if watched else None),
                            watch=watched, global_batch=global_batch,
                            micro_batch=micro_batch, epochs=epochs, steps=steps, compile=compile_,
                            model=model.value if model else None, nproc=nproc, oversubscribe=oversubscribe)
    with prog.fails_on(rules.RequestError):
        request.check()  # the numbers' ranges, before the facts are read (seconds)
    options = None
    if measure or calibrate:
        options = MeasureOptions(workload=workload or MeasureOptions.workload, budget_s=budget, python=python,
                                 started=started, search=measure)
    host = None if facts_file else open_host(prog, replay)
    bar = None
    if options is not None:
        bar = TrialsBar(f"measuring {options.workload} within --budget {budget:g} s: starting the worker (importing "
                        "torch), then a calibration trial")
    try:
        if host is None:
            facts = load_facts(prog, facts_file or "")
        else:
            facts = tuning.read_facts(host, python)
            check_answered(prog, facts, python, host)
        with bar if bar is not None else contextlib.nullcontext():
            tuned = tuning.tune(facts, request, host, options,
                                on_trial=bar.on_trial if bar is not None and measure else None,
                                on_label=bar.label if bar is not None and calibrate else None)
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
    r = redactor(facts) if redact else None
    if write is not None:   # first: the report ends with what to do with the file
        with prog.fails_on(config.ConfigError):
            tuned.write(write, force)
        prog.note(f"wrote {r.text(write) if r else write}: {tuned.rec.settings.words()} "
                  f"({tuned.rec.settings.short()}, chosen by {chosen_by(tuned.rec.chosen_by)})")
    present(TuneView(tuned, settings=not write, written=write, verbose=verbose), fmt, r)
    raise typer.Exit(EXIT_OK)
