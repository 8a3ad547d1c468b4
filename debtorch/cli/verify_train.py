"""``debtorch verify-train``: baseline (PyTorch's defaults) against tuned settings on a real training
loop (docs/verify-train.md; exit codes: docs/cli.md).  Torch-free: every trial runs in a worker of
the target interpreter (``--python``)."""

import contextlib
import os
import time
from typing import Optional

import typer

from debtorch.cli.shared import (
    DEVICE_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Prog,
    choose_format,
    device_option,
    exit_for,
    given_paths,
    open_host,
    present,
    redactor,
)
from debtorch.report import Format
from debtorch.textsafe import printable

prog = Prog("debtorch verify-train")


def verify_train(
    workload: str = typer.Option("builtin:cnn", "--workload", metavar="MODULE:FUNCTION", help="What to train: builtin:cnn, builtin:transformer or your module:function (docs/workloads.md)."),
    device: Optional[str] = typer.Option(None, "--device", metavar="DEVICE", help=f"Train on {DEVICE_HELP} (default: cuda when this torch sees a GPU)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="PATH", help="Tuned settings from 'debtorch tune --write' (default: tuned now, by rules)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter that trains (default: $VIRTUAL_ENV's, else this one)."),
    quick: bool = typer.Option(False, "--quick", help="The real path in seconds: few steps, small built-in workloads (CI)."),
    budget: Optional[float] = typer.Option(None, "--budget", metavar="SECONDS", help="Wall-clock seconds the whole run may take, start-up included (default 300; --quick 13)."),
    repeats: int = typer.Option(3, "--repeats", metavar="N", help="Interleaved rounds at least (default 3); more until the speed-up resolves or the budget is spent."),
    steps: Optional[int] = typer.Option(None, "--steps", metavar="N", help="Timed optimizer steps per trial (default 20; --quick 3)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", metavar="N", help="Untimed warm-up steps per trial (default 3; --quick 1)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", metavar="N", help="Cap of the convergence runs, in optimizer steps (default 400; --quick 12; 0 skips them)."),
    target_loss: Optional[float] = typer.Option(None, "--target-loss", metavar="LOSS", help="Loss for time-to-target (default: the workload's target_loss)."),
    seed: int = typer.Option(0, "--seed", help="Seed of model weights and batch order (the same for every trial)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document with everything (config and the machine's facts included)."),
    plot_file: Optional[str] = typer.Option(None, "--plot", metavar="FILE", help="Write throughput, step-time breakdown and loss curves to FILE.png or FILE.svg (needs matplotlib)."),
    profile: Optional[str] = typer.Option(None, "--profile", metavar="DIR", help="Write a torch.profiler trace of a few tuned steps to DIR/trace.json (Perfetto, chrome://tracing)."),
    nproc: Optional[int] = typer.Option(None, "--nproc", metavar="N", help="Also run tuned in N processes with torch.distributed.run and report scaling (default: the config's nproc)."),
    nnodes: Optional[int] = typer.Option(None, "--nnodes", metavar="N", help="Passed to torch.distributed.run."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", metavar="R", help="Passed to torch.distributed.run."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", metavar="HOST", help="Passed to torch.distributed.run."),
    master_port: Optional[int] = typer.Option(None, "--master-port", metavar="PORT", help="Passed to torch.distributed.run."),
    timeout: float = typer.Option(900.0, "--timeout", metavar="SECONDS", help="Longest one trial may take before its worker is killed."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --plot file or --profile DIR/trace.json."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also the statistics behind the verdict (Pocock's boundary, looks); on failure, the worker's traceback."),
    facts_file: Optional[str] = typer.Option(None, "--facts", metavar="FILE", help="Not accepted: verify-train trains on this machine (tune --facts tunes for saved facts)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Not accepted: verify-train trains on this machine (tune --host tunes for a recorded one)."),
    oversubscribe: bool = typer.Option(False, "--oversubscribe", help="Allow --nproc (and a config's workers) beyond this machine's bound (4 x its usable CPUs)."),
    redact: bool = typer.Option(False, "--redact", help="Replace host and user names, home paths, serials, UUIDs, MAC and IP addresses in the report and --json."),
) -> None:
    """Baseline (PyTorch's defaults) against tuned settings on a real training loop: speed, where time goes, time to target loss.

    Exit status: 0 measured (whatever the verdict), 1 the run failed, 2 bad usage or input, 130 interrupted.
    """
    started = time.monotonic()  # --budget counts from here: reading the machine is part of it
    from debtorch.report.plot import PlotError, check_plot_path, plot  # defer: as above
    from debtorch.report.progress import StepsBar  # defer: as above
    from debtorch.report.verify import RefusedView, VerifyView  # defer: as above
    from debtorch.verify import run  # defer: the trainer's plan, worker and report, only for this command

    fmt = choose_format(prog, json_out)
    if facts_file or replay:
        prog.fail(f"{'--facts' if facts_file else '--host'} describes another machine; verify-train trains on this one")
    given_paths(prog, config=config, python=python, plot=plot_file, profile=profile)
    if force and not (plot_file or profile):
        prog.fail("--force only applies to --plot and --profile")
    if plot_file:
        with prog.fails_on(PlotError):
            check_plot_path(plot_file, force)
    facts = None
    try:
        options = run.Options(
            workload=workload, device=device_option(prog, device), config=config, python=python, quick=quick,
            budget=budget, started=started, repeats=repeats, steps=steps, warmup=warmup, max_steps=max_steps, target_loss=target_loss, seed=seed,
            profile=profile, nproc=nproc, launcher_args=run.launcher_args(nnodes, node_rank, master_addr, master_port),
            timeout=timeout, force=force, cwd=os.getcwd(), oversubscribe=oversubscribe)
        with contextlib.closing(open_host(prog)) as host:   # open while measuring: the load is read after
            ready = run.prepare(options, host)
            facts = ready.facts
            r = redactor(facts) if redact else None

            def warn(text: str) -> None:
                prog.warn(r.text(text) if r else text)

            for w in ready.warnings:
                warn(w)
            bar = StepsBar()
            with bar:
                outcome = ready.run(bar, warn=warn)
    except run.Refused as exc:
        code = exit_for(exc)
        r = redactor(facts) if redact else None
        if fmt is Format.json:  # --json promises a document, a refusal included
            present(RefusedView(str(exc), code, exc.failure, facts), fmt, r)
        prog.fail(r.text(str(exc)) if r else str(exc), code)
    m = outcome.measured
    if m.interrupted:
        code = EXIT_INTERRUPTED
    elif m.failure is not None:
        code = exit_for(m.failure)
    else:
        code = EXIT_OK
    if plot_file and outcome.measured_anything:
        try:
            plot(m, outcome.summary, plot_file, force)
            prog.note(f"wrote {r.text(plot_file) if r else plot_file}")
        except PlotError as exc:
            prog.note(str(exc))
            code = code or EXIT_FAILED
    present(VerifyView(outcome, code, verbose), fmt, r)
    if m.failure is not None:
        prog.note(r.text(m.failure.line()) if r else m.failure.line())
        if verbose and m.failure.detail.get("traceback"):
            traceback = r.text(m.failure.detail["traceback"]) if r else m.failure.detail["traceback"]
            typer.echo("\n".join(printable(line) for line in str(traceback).splitlines()), err=True)
    if code == EXIT_INTERRUPTED:
        prog.note("interrupted; the report shows what was measured so far")
    raise typer.Exit(code)
