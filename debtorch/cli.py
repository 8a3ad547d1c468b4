"""The command line.  Thin: parse arguments, call a library function, render,
choose the exit code.  Written in the ``param: T = typer.Option(...)`` style
so that Debian 12's typer 0.7 runs it (no Annotated, no ``X | None``).

Exit codes (docs/cli.md): 0 fine; 1 findings at or above ``--fail-on``, or a
run that failed; 2 bad usage or unreadable input; 130 interrupted (Ctrl-C);
143 terminated (SIGTERM).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import List, Optional

import typer

from debtorch import __version__

app = typer.Typer(
    name="debtorch",
    help="Is this Debian machine right for PyTorch training, and how should it train?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from debtorch.commands import EXIT_USAGE  # noqa: E402
from debtorch.commands import fail as _fail_as  # noqa: E402


class Format(str, Enum):
    text = "text"
    json = "json"


def fail(message: str, code: int = EXIT_USAGE) -> "typer.Exit":
    """Print one line to stderr and leave with ``code``."""
    _fail_as("debtorch", message, code)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"debtorch {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """debtorch: doctor, tuner and training benchmark for PyTorch on Debian."""


def _host(replay: Optional[str], record: Optional[str] = None):
    from debtorch.host import LiveHost, RecordingHost, ReplayHost, Unavailable

    if replay and record:
        fail("--host and --record cannot be used together")
    if replay:
        try:
            return ReplayHost(replay)
        except Unavailable as exc:
            fail(f"--host {exc.reason}")
    if record:
        from debtorch.facts.apt import DPKG_STATUS, trim_dpkg_status
        from debtorch.facts.nvidia import PCI_IDS, trim_cmdline, trim_pci_ids  # only what the facts read

        try:
            return RecordingHost(record, trim={DPKG_STATUS: trim_dpkg_status, "/proc/cmdline": trim_cmdline,
                                               **{p: trim_pci_ids for p in PCI_IDS}})
        except Unavailable as exc:
            fail(f"--record {exc.reason}")
    return LiveHost()


@app.command()
def facts(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document (schema_version 1)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to inspect (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: report its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Import torch in the target interpreter and run it on each device (seconds)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Describe a machine recorded in DIR instead of this one."),
    record: Optional[str] = typer.Option(None, "--record", metavar="DIR", help="Also copy everything read into DIR, for replay with --host."),
) -> None:
    """Print what is known about this machine, with honest unknowns."""
    from debtorch import facts as facts_mod
    from debtorch import render

    _check_python(python, replay)
    host = _host(replay, record)
    try:
        doc = facts_mod.collect(host, facts_mod.Options(python=python, data=data, deep=deep))
    finally:
        host.close()
    if record:
        path = host.save()
        typer.echo(f"debtorch: recorded this machine in {path.parent}", err=True)
    if json_out:
        typer.echo(json.dumps(doc, indent=2, sort_keys=False, default=_json_default))
    else:
        render.print_facts(doc)


class FailOn(str, Enum):
    error = "error"
    warning = "warning"


def _check_python(python: Optional[str], replay: Optional[str] = None) -> None:
    """A --python that names no interpreter is bad usage (exit 2), not an unknown section.

    A bare name is looked up on PATH, as running it would.  With --host the path
    belongs to the recorded machine, so there is nothing here to check."""
    import os
    import shutil

    if not python or replay:
        return
    if os.sep not in python:
        if shutil.which(python) is None:
            fail(f"--python {python}: not found on PATH")
    elif not (os.path.isfile(python) and os.access(python, os.X_OK)):
        fail(f"--python {python}: not an executable file")


@app.command()
def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: schema_version, facts, findings."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show info findings and the facts each finding rests on."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to check (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: check its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Also import torch in the target interpreter and run it on each device."),
    fail_on: FailOn = typer.Option("error", "--fail-on", help="Exit 1 when a finding reaches this level."),
    redact: bool = typer.Option(False, "--redact", help="Replace host and user names, home paths, serials, UUIDs, MAC and IP addresses."),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help="Site rules and silenced ids (see docs/site-config.md), besides /etc/debtorch/doctor.toml."),
    facts_file: Optional[str] = typer.Option(None, "--facts", metavar="FILE", help="Check facts saved with 'debtorch facts --json' elsewhere; the live machine is not touched."),
    collect_env: Optional[str] = typer.Option(None, "--from-collect-env", metavar="FILE", help="Check the text of 'python -m torch.utils.collect_env' (- reads stdin)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Check a machine recorded with 'debtorch facts --record DIR'."),
) -> None:
    """Is this machine set up right for PyTorch training? Findings with the Debian fix for each.

    Exit status: 0 no finding at --fail-on level, 1 findings at that level, 2 bad usage or unreadable input.
    """
    from debtorch import facts as facts_mod
    from debtorch import render
    from debtorch.doctor import Context, diagnose
    from debtorch.doctor import siteconfig

    sources = [x for x in (facts_file, collect_env, replay) if x]
    if len(sources) > 1:
        fail("use only one of --facts, --from-collect-env and --host")
    if (facts_file or collect_env) and (python or data or deep):
        fail("--python, --data and --deep describe a live machine; they cannot be combined with --facts or --from-collect-env")
    _check_python(python, replay)
    from debtorch import knowledge

    try:
        knowledge.load()   # a broken checks/ folder is bad input, not a crash of every check
    except knowledge.KnowledgeError as exc:
        fail(str(exc))
    lacking = None
    host = None
    if facts_file:
        try:
            doc = facts_mod.load(facts_file)
        except facts_mod.FactsFileError as exc:
            fail(str(exc))
        source = "facts"
    elif collect_env:
        from debtorch.facts import collectenv

        try:
            doc = collectenv.parse_file(collect_env)
        except collectenv.CollectEnvError as exc:
            fail(str(exc))
        lacking = (doc.get("collect_env") or {}).get("lacking") or []
        source = "collect_env"
    else:
        host = _host(replay)
        try:
            doc = facts_mod.collect(host, facts_mod.Options(python=python, data=data, deep=deep))
        finally:
            host.close()
        source = "live" if host.live else "facts"
    try:
        from debtorch.host import LiveHost

        site = siteconfig.load(host if host is not None else LiveHost(), config)
    except siteconfig.SiteConfigError as exc:
        fail(str(exc))
    report = diagnose(doc, Context(site=site, source=source))
    if redact:
        from debtorch.redact import redact_report

        doc, report, site_files = redact_report(doc, report, site.files)
    else:
        site_files = site.files
    code = report.exit_code(fail_on.value)
    if json_out:
        out = {"schema_version": 1, "debtorch_version": __version__, "exit_code": code,
               "fail_on": fail_on.value, "site_config": site_files, **report.to_json(), "facts": doc}
        if lacking is not None:
            out["lacking"] = lacking
        typer.echo(json.dumps(out, indent=2, default=_json_default))
    else:
        render.print_doctor(render.doctor_lines(doc, report, verbose=verbose, unicode=_unicode_ok(),
                                                lacking=lacking, site_files=site_files))
    raise typer.Exit(code)


def _unicode_ok() -> bool:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower()
    return "utf" in enc


# --- debtorch tune (issue 4): the command lives in debtorch/commands/tune.py ---
from debtorch.commands.tune import tune as _tune  # noqa: E402

app.command(name="tune")(_tune)
# --- end debtorch tune -------------------------------------------------------

# --- debtorch verify-train (issue 5): the command lives in debtorch/commands/verify_train.py ---
from debtorch.commands.verify_train import verify_train as _verify_train  # noqa: E402

app.command(name="verify-train")(_verify_train)
# --- end debtorch verify-train ---------------------------------------------------------------

# --- debtorch fleet (issue 12): the command lives in debtorch/fleet/command.py ---
from debtorch.fleet.command import fleet as _fleet  # noqa: E402

app.command(name="fleet")(_fleet)
# --- end debtorch fleet --------------------------------------------------------


def _json_default(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def _terminated(signum, frame) -> None:
    # SIGTERM (kill, a batch scheduler's timeout) unwinds like an exit, so the
    # training worker is stopped and its temporary folder removed.
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    import signal

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("debtorch: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
