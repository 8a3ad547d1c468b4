"""``debtorch verify-train``: baseline (PyTorch's defaults) against tuned settings on a real training loop.

Thin: parse options, call :mod:`debtorch.verify`, render, choose the exit
code.  Torch-free: every trial runs in a worker of the target interpreter
(``--python``).  docs/verify-train.md describes what is measured and how.

Exit codes: 0 measured (whatever the verdict); 1 the run failed (out of
memory, a DataLoader worker killed, the worker died or timed out); 2 bad
usage or input (options, a config that does not load, a workload that cannot
be imported, an interpreter without torch, a device this torch cannot use);
130 interrupted (Ctrl-C), after printing what was measured so far.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import typer

from debtorch.commands import exit_for, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Device, fail, warn


def _fail(message: str, code: int = EXIT_USAGE) -> "typer.Exit":
    fail("debtorch verify-train", message, code)


def _warn(message: str) -> None:
    warn("debtorch verify-train", message)


def _launcher_args(nnodes: Optional[int], node_rank: Optional[int], master_addr: Optional[str],
                   master_port: Optional[int]) -> list:
    """torch.distributed.run's multi-node options, passed through as given."""
    args = []
    if nnodes is not None:
        args.append(f"--nnodes={nnodes}")
    if node_rank is not None:
        args.append(f"--node_rank={node_rank}")
    if master_addr is not None:
        args.append(f"--master_addr={master_addr}")
    if master_port is not None:
        args.append(f"--master_port={master_port}")
    return args


class _BarProgress:
    """A rich progress bar on stderr (a terminal), or one line per trial (a log)."""

    def __init__(self, quiet: bool = False):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self.bar = None
        self.task = None
        self.expected = self.done = 0
        self.count = 0

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed:.0f}/{task.total:.0f} steps"), TimeElapsedColumn(),
                                console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("starting the worker", total=1)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def plan(self, total_steps: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, total=max(1, total_steps), completed=0)

    def begin(self, label: str, steps: int) -> None:
        self.expected, self.done = steps, 0
        self.count += 1
        if self.bar is not None:
            self.bar.update(self.task, description=label)
        elif not self.quiet:
            self.console.print(f"verify-train: {label}", markup=False, highlight=False)

    def advance(self, event: dict) -> None:
        if event.get("event") not in (None, "progress"):
            return
        self.done += 1
        if self.bar is not None and self.done <= self.expected:
            self.bar.advance(self.task, 1)

    def end(self) -> None:
        if self.bar is not None and self.done < self.expected:
            self.bar.advance(self.task, self.expected - self.done)


def verify_train(
    workload: str = typer.Option("builtin:cnn", "--workload", metavar="MODULE:FUNCTION", help="What to train: builtin:cnn, builtin:transformer or your module:function (docs/workloads.md)."),
    device: Optional[Device] = typer.Option(None, "--device", help="Train on cpu or cuda (default: cuda when this torch sees a GPU)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="PATH", help="Tuned settings from 'debtorch tune --write' (default: tuned now, by rules)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter that trains (default: $VIRTUAL_ENV's, else this one)."),
    quick: bool = typer.Option(False, "--quick", help="The real path in seconds: few steps, small built-in workloads (CI)."),
    repeats: int = typer.Option(3, "--repeats", metavar="N", help="Interleaved rounds of baseline and tuned (at least 3)."),
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
    verbose: bool = typer.Option(False, "--verbose", "-v", help="On failure, also print the worker's traceback."),
) -> None:
    """Baseline (PyTorch's defaults) against tuned settings on a real training loop: speed, where time goes, time to target loss.

    Exit status: 0 measured (whatever the verdict), 1 the run failed, 2 bad usage or input, 130 interrupted.
    """
    from debtorch.verify import analysis, report
    from debtorch.verify.failures import from_worker_error, stale_config
    from debtorch.verify.measure import Plan, Verifier

    # -- options (exit 2 before anything runs) ------------------------------
    launcher = _launcher_args(nnodes, node_rank, master_addr, master_port)
    if launcher and not (nproc and nproc > 1):
        _fail("--nnodes, --node-rank, --master-addr and --master-port need --nproc N (N > 1)")
    if timeout <= 0:
        _fail(f"--timeout must be a positive number of seconds (got {timeout:g})")
    kw = {"workload": workload, "device": device.value if device else None, "repeats": repeats,
          "target_loss": target_loss, "seed": seed, "launcher_args": launcher, "timeout": timeout,
          "cwd": os.getcwd(), "profile_dir": profile}
    for name, value in (("steps", steps), ("warmup", warmup), ("converge_steps", max_steps)):
        if value is not None:
            kw[name] = value
    plan = Plan.quick_plan(**kw) if quick else Plan(**kw)
    problems = plan.problems()
    if nproc is not None and nproc < 1:
        problems.append("--nproc must be >= 1")
    if problems:
        _fail(problems[0])
    if force and not (plot_file or profile):
        _fail("--force only applies to --plot and --profile")
    if plot_file:
        try:
            report.check_plot_path(plot_file, force)
        except report.PlotError as exc:
            _fail(str(exc))
    if profile:
        trace = os.path.join(profile, "trace.json")
        if os.path.lexists(trace) and not force:
            _fail(f"--profile {profile}: {trace} exists; use --force to replace it")
        try:
            os.makedirs(profile, exist_ok=True)
        except OSError as exc:
            _fail(f"--profile {profile}: cannot create the directory ({exc.strerror or exc})")
        if not os.access(profile, os.W_OK | os.X_OK):
            _fail(f"--profile {profile}: directory is not writable")

    cfg = None
    if config:
        from debtorch.tune.config import ConfigError, load_config

        try:
            cfg = load_config(config)
        except ConfigError as exc:
            _fail(f"--config {exc}")

    from debtorch.host import LiveHost
    from debtorch.train.runner import WorkerError, worker_python

    host = LiveHost()
    try:
        try:
            plan.python = worker_python(python, host)
        except WorkerError as exc:
            _fail(str(exc))
        facts = _facts(host, plan.python)
    finally:
        host.close()

    warnings = []
    config_doc = None
    if cfg is not None:
        from debtorch.tune import fingerprint

        stale = stale_config(cfg.fingerprint, fingerprint.from_facts(facts))
        if stale:
            warnings.append(f"{config} was tuned on another machine or environment: {'; '.join(stale)} "
                            "(re-tune here: debtorch tune --measure --write)")
        config_doc = {"source": "config", "path": os.path.abspath(config), "settings": cfg.settings.to_dict(),
                      "tuned": cfg.tuned, "fingerprint": cfg.fingerprint, "env": cfg.env,
                      "total_steps": cfg.total_steps, "epochs": cfg.epochs, "stale": stale}
    if nproc is not None:
        plan.nproc = nproc
    for w in warnings:
        _warn(w)

    verifier = Verifier(plan, facts=facts)
    measured = verifier.measured
    exit_code = EXIT_OK
    try:
        # The Verifier closes its worker on the way out, and kills it on any exception
        # (Ctrl-C, or a one-line exit below), so no worker outlives the command.
        with _BarProgress(quiet=False) as bar, verifier:
            verifier.progress = bar
            try:
                info = verifier.start()
            except WorkerError as exc:
                failure = from_worker_error(exc, "starting", facts)
                _fail(failure.message + (f"; {failure.fix}" if failure.fix else ""), exit_for(failure))
            dev = info.get("device") or "cpu"
            if cfg is not None:
                tuned = cfg.settings
                cfg_device = cfg.device
                if cfg_device != dev.split(":")[0]:
                    warnings.append(f"{config} was tuned for {cfg_device}; this run trains on {dev}")
                    _warn(warnings[-1])
            else:
                tuned, config_doc = _tune_now(facts, dev, plan, info)
            if nproc is None:
                plan.nproc = tuned.nproc  # the config's (or the rules') processes per machine
            from debtorch.train.settings import Settings

            verifier.run(Settings(), tuned)
    except KeyboardInterrupt:
        measured.interrupted = True
        exit_code = EXIT_INTERRUPTED
    if measured.failure is not None and exit_code == EXIT_OK:
        exit_code = exit_for(measured.failure)

    summary = report.build(measured)
    verdict = analysis.verdict(summary) if summary["baseline"]["runs"] or summary["tuned"]["runs"] else ""
    if measured.failure is not None and not verdict:
        verdict = f"failed: {measured.failure.line()}"
    if json_out:
        doc = report.to_json(measured, summary, verdict, exit_code, config=config_doc, facts=facts)
        doc["warnings"] = warnings
        typer.echo(json.dumps(doc, indent=2, default=str))
    else:
        report.render(measured, summary, verdict, warnings)
    if measured.failure is not None:
        typer.echo(f"debtorch verify-train: {measured.failure.line()}", err=True)
        tb = measured.failure.detail.get("traceback")
        if verbose and tb:
            typer.echo(tb, err=True)
    if plot_file and (summary["baseline"]["runs"] or summary["tuned"]["runs"]):
        try:
            report.plot(measured, summary, plot_file)
            typer.echo(f"debtorch verify-train: wrote {plot_file}", err=True)
        except report.PlotError as exc:
            typer.echo(f"debtorch verify-train: {exc}", err=True)
            exit_code = exit_code or EXIT_FAILED
    if exit_code == EXIT_INTERRUPTED:
        typer.echo("debtorch verify-train: interrupted; the report shows what was measured so far", err=True)
    raise typer.Exit(exit_code)


def _facts(host, python: str) -> dict:
    """The machine's facts (no --deep): the JSON document's and the stale-config check's."""
    from debtorch import facts as facts_mod

    return facts_mod.collect(host, facts_mod.Options(python=python))


def _tune_now(facts: dict, device: str, plan, info: dict):
    """Tuned settings by the rules, for this machine and workload; and the JSON's config section."""
    from debtorch.tune import rules

    request = rules.Request(device=device.split(":")[0], steps=plan.converge_steps or None,
                            model="conv" if info.get("convolutional") else "other")
    try:
        rec = rules.recommend(facts, request)
    except rules.RequestError as exc:
        _fail(f"cannot tune for this machine: {exc}")
    doc = {"source": "rules", "settings": rec.settings.to_dict(),
           "reasons": {k: str(v) for k, v in rec.reasons.items()}, "notes": list(rec.notes),
           "env": dict(rec.env)}
    return rec.settings, doc
