"""``debtorch fleet``: many machines, one verdict (docs/fleet.md; exit codes: docs/cli.md).  In gathered
mode every rank exits with rank 0's code."""

import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import typer

from debtorch import facts as facts_mod
from debtorch import hostlist
from debtorch.budget import seconds_problem
from debtorch.cli.shared import EXIT_INTERRUPTED, FailOn, Prog, check_python, choose_format
from debtorch.host import LiveHost, ReplayHost, Unavailable
from debtorch.report import show

if TYPE_CHECKING:
    from debtorch.report.redact import Redactor

prog = Prog("debtorch fleet")
MAX_WORKERS = 8             # processes reading saved documents: more rarely helps, the disk is shared
SKIPPED_SHOWN = 10          # files named as skipped on stderr (--json lists all)


def _marks() -> dict:
    from debtorch.report.doctor import MARKS_ASCII, MARKS_UNICODE  # defer: only for this command

    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return MARKS_UNICODE if "utf" in enc else MARKS_ASCII


def _describe(replay: Optional[str], python: Optional[str], deep: bool, environ: dict) -> Callable[[], tuple]:
    """The function that collects this node's facts and runs its doctor: (facts, findings, name)."""
    from debtorch.doctor import Context, diagnose  # defer: only for this command
    from debtorch.fleet import gather  # defer: as above

    def describe() -> tuple:
        host = ReplayHost(replay) if replay else LiveHost()
        try:
            doc = facts_mod.collect(host, facts_mod.Options(python=None if replay else python, deep=deep))
        finally:
            host.close()
        found = diagnose(doc, Context(source="facts" if replay else "live")).findings
        return doc, [f.to_json() for f in found], gather.node_name(doc, environ)

    return describe


def _emit(summary: Any, fail_on: str, fmt: Any, verbose: bool, verdict: Any, notes: list,
          redactor: Optional["Redactor"]) -> None:
    from debtorch.report.fleet import FleetView  # defer: only for this command

    show(FleetView(summary, fail_on, verdict, notes, verbose, _marks(), redactor), fmt)


def _note_skipped(skipped: list, redactor: Optional["Redactor"]) -> None:
    """Name the files that are no node's document, on stderr (at most SKIPPED_SHOWN of them)."""
    for x in skipped[:SKIPPED_SHOWN]:
        line = f"skipped {x.path}: {x.reason}"
        prog.note(redactor.text(line) if redactor is not None else line)
    if len(skipped) > SKIPPED_SHOWN:
        prog.note(f"skipped {len(skipped) - SKIPPED_SHOWN} more files that are no node's document (--json lists them)")


def _redact_names(nodes: list, redactor: "Redactor") -> None:
    for n in nodes:
        if not n.name.startswith("rank "):
            n.name = redactor.token("HOST", n.name)


def _write_exclude(path: str, verdict: Any, force: bool) -> None:
    from debtorch import outputs  # defer: only with --exclude-file

    # srun --exclude takes host names: a second rank's ":3" goes; a name that is not a host's is refused.
    names = sorted({re.sub(r":\d+$", "", n) for n in (verdict.exclude if verdict is not None else [])})
    odd = [n for n in names if not hostlist.is_host(n)]
    if odd:
        prog.fail(f"--exclude-file {path}: node {hostlist.safe(odd[0])} has no host name srun --exclude takes; "
                  "nothing written", 1)
    with prog.fails_on(outputs.OutputError, code=1):
        outputs.write_atomic(path, (hostlist.compress(names) + "\n") if names else "", force=force)
    prog.note(f"wrote {len(names)} node(s) to exclude to {path}")


def fleet(
    paths: Optional[List[str]] = typer.Argument(None, metavar="[FILE|DIR]...", help="Compare saved 'debtorch facts --json' or 'doctor --json' documents (a folder: its *.json files) instead of gathering."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: schema_version, nodes, summary, findings (and probe)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show info findings."),
    fail_on: FailOn = typer.Option("error", "--fail-on", help="Exit 1 when a finding reaches this level."),
    redact: bool = typer.Option(False, "--redact", help="Replace node names, IP and MAC addresses and the like with stable tokens."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose torch.distributed gathers (default: $VIRTUAL_ENV's, else this one); also the one whose PyTorch is inspected."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Describe a machine recorded in DIR instead of this node ({rank} in DIR is replaced by the rank)."),
    deep: bool = typer.Option(False, "--deep", help="Each node also imports torch in a probe (the NCCL and cuDNN it loads)."),
    timeout: float = typer.Option(60.0, "--timeout", metavar="SECONDS", help="How long rank 0 waits for every node's document; a node later than that is named missing."),
    do_probe: bool = typer.Option(False, "--probe", help="Also find slow or broken nodes: a compute check per rank and all-reduce between pairs."),
    budget: float = typer.Option(30.0, "--budget", metavar="SECONDS", help="Time --probe may take, all nodes together."),
    exclude_file: Optional[str] = typer.Option(None, "--exclude-file", metavar="PATH", help="With --probe: write the nodes to exclude (for srun --exclude)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --exclude-file."),
    tuned: Optional[str] = typer.Option(None, "--tuned", metavar="FILE", help="A debtorch.toml from 'debtorch tune --write': name the nodes it was not tuned for."),
    secret_file: Optional[str] = typer.Option(None, "--secret-file", metavar="PATH", help="A secret shared by every rank (a file only you can read; or $DEBTORCH_FLEET_SECRET): what the ranks send is signed, and nothing unsigned is believed."),
) -> None:
    """Compare the nodes of a job (or saved documents): the differences that hang or slow multi-node training, and the bad nodes.

    Exit status: 0 no finding at --fail-on level, 1 findings at that level or a node that did not answer, 2 bad usage or unreadable input.
    """
    from debtorch.fleet import gather, offline, probe  # defer: only for this command
    from debtorch.fleet.rendezvous import RendezvousError, from_environ, listen_address, load_secret  # defer: as above
    from debtorch.report.redact import Redactor  # defer: as above

    fmt = choose_format(prog, json_out)
    level = fail_on.value
    problem = seconds_problem("--timeout", timeout)
    if problem is None and do_probe:
        problem = seconds_problem("--budget", budget, probe.MIN_BUDGET_S, to="probe anything")
    if problem:
        prog.fail(problem)
    if (exclude_file or force) and not do_probe:
        prog.fail("--exclude-file and --force go with --probe")
    if force and not exclude_file:
        prog.fail("--force only applies to --exclude-file")
    if exclude_file:
        from debtorch import outputs  # defer: only with --exclude-file

        with prog.fails_on(outputs.OutputError):
            outputs.check_destination(exclude_file, force)
    with prog.fails_on(offline.FleetInputError):
        fingerprint = offline.load_tuned(tuned) if tuned else None
    redactor = Redactor() if redact else None
    rename = (lambda nodes: _redact_names(nodes, redactor)) if redactor else None

    if paths:
        if replay or do_probe or deep or python or secret_file:
            prog.fail("--host, --python, --deep, --probe and --secret-file describe live nodes; saved documents are "
                      "compared as they are")
        workers = min(len(LiveHost().affinity()) or 1, MAX_WORKERS)
        with prog.fails_on(offline.FleetInputError):
            summary = offline.from_files(paths, tuned=fingerprint, tuned_path=tuned, rename=rename, workers=workers)
        _note_skipped(summary.skipped, redactor)
        _emit(summary, level, fmt, verbose, None, [], redactor)
        raise typer.Exit(summary.exit_code(level))

    host = LiveHost()
    environ = host.environ
    with prog.fails_on(RendezvousError):
        rdzv = from_environ(environ)
        secret = load_secret(os.environ, secret_file)   # the secret is never one of the facts' variables
    if rdzv is None:
        prog.fail("no launcher here (RANK/WORLD_SIZE/MASTER_ADDR or SLURM_PROCID/SLURM_NTASKS): start it with srun "
                  "or torchrun (docs/fleet.md), or compare saved documents: debtorch fleet FILE|DIR ...")
    if replay:
        replay = replay.replace("{rank}", str(rdzv.rank))
        with prog.fails_on(Unavailable, prefix="--host "):
            ReplayHost(replay)
    interpreter = python or host.default_python   # the live one, whose torch.distributed gathers
    check_python(prog, interpreter)
    interpreter = shutil.which(interpreter) or interpreter
    listen = None
    if rdzv.rank == 0 and not rdzv.agent_store:
        listen, note = listen_address(rdzv, host.resolve)
        if note:
            prog.warn(note)
    options = gather.Options(timeout=timeout, fail_on=level, probe=do_probe, budget=budget, tuned=fingerprint,
                             tuned_path=tuned, rename=rename, listen=listen, secret=secret)

    def on_report(outcome: Any) -> None:
        for warning in outcome.warnings:
            prog.warn(warning)
        _emit(outcome.summary, level, fmt, verbose, outcome.verdict, outcome.notes, redactor)
        if exclude_file and outcome.verdict is not None:
            _write_exclude(exclude_file, outcome.verdict, force)

    try:
        outcome = gather.run(rdzv, interpreter, _describe(replay, python, deep, environ), options, environ, on_report)
    except gather.GatherError as exc:
        prog.fail(str(exc), exc.code)
    except KeyboardInterrupt:
        prog.fail("interrupted", EXIT_INTERRUPTED)
    raise typer.Exit(outcome.code)
