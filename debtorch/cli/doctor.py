"""``debtorch doctor``: is this machine set up right for PyTorch training?"""

import sys
from typing import Optional

import typer

from debtorch import facts as facts_mod
from debtorch import inputs
from debtorch.cli.shared import (
    EXIT_FAILED,
    EXIT_OK,
    FailOn,
    Prog,
    check_python,
    choose_format,
    collect,
    given_paths,
    load_facts,
    open_host,
    present,
    redactor,
)
from debtorch.host import LiveHost

prog = Prog("debtorch")
MAX_DATA_RATE = 1e9   # samples per second: beyond any loader


def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: schema_version, facts, findings."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show info findings and the facts each finding rests on."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to check (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: check its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Also import torch in the target interpreter and run it on each device."),
    measure_data: bool = typer.Option(False, "--measure-data", help="Also read a sample of --data's files with a cold cache (at most 20 s; never writes): MB/s and files/s."),
    data_rate: Optional[float] = typer.Option(None, "--data-rate", metavar="SAMPLES_PER_S", help="Samples per second the loader needs (one file a sample): --measure-data judges the disk against it."),
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
    from debtorch import knowledge  # defer: the checks and their data, only for this command
    from debtorch.doctor import Context, diagnose, siteconfig  # defer: as above
    from debtorch.report.doctor import DoctorView  # defer: as above

    fmt = choose_format(prog, json_out)
    given_paths(prog, python=python, data=data, config=config, facts=facts_file, from_collect_env=collect_env,
                host=replay)
    if len([x for x in (facts_file, collect_env, replay) if x]) > 1:
        prog.fail("use only one of --facts, --from-collect-env and --host")
    if (facts_file or collect_env) and (python or data or deep or measure_data):
        prog.fail("--python, --data, --deep and --measure-data describe a live machine; they cannot be combined with "
                  "--facts or --from-collect-env")
    if measure_data and not data:
        prog.fail("--measure-data needs --data DIR: the folder whose reads it measures")
    if data_rate is not None and not measure_data:
        prog.fail("--data-rate only applies to --measure-data")
    if data_rate is not None and not (inputs.finite(data_rate) and 0 < data_rate <= MAX_DATA_RATE):
        prog.fail(f"--data-rate must be a number of samples per second > 0 and at most {MAX_DATA_RATE:g} "
                  f"(got {data_rate:g})")
    check_python(prog, python, elsewhere=bool(replay))
    with prog.fails_on(knowledge.KnowledgeError):
        knowledge.load()  # no checks/ folder is bad input, not a crash of every check
    lacking = host = None
    if facts_file:
        doc, source = load_facts(prog, facts_file), "facts"
    elif collect_env:
        from debtorch.facts import collectenv  # defer: only --from-collect-env reads a report

        with prog.fails_on(collectenv.CollectEnvError):
            doc, source = collectenv.parse_file(collect_env), "collect_env"
        lacking = (doc.get("collect_env") or {}).get("lacking") or []
    else:
        host = open_host(prog, replay)
        options = facts_mod.Options(python=python, data=data, deep=deep, measure_data=measure_data,
                                    data_rate=data_rate)
        if measure_data:
            from debtorch.report.progress import ShareBar  # defer: only --measure-data shows a bar

            with ShareBar() as bar:
                options.progress = bar
                doc = collect(prog, host, options)
        else:
            doc = collect(prog, host, options)
        source = "live" if host.live else "facts"
    with prog.fails_on(siteconfig.SiteConfigError, knowledge.KnowledgeError):  # checks/ read when first needed
        site = siteconfig.load(host if host is not None else LiveHost(), config)
        report = diagnose(doc, Context(site=site, source=source))
    site_files = site.files
    r = redactor(doc) if redact else None
    if r is not None:
        from debtorch.report.redact import redact_report  # defer: only --redact

        doc, report, site_files = redact_report(doc, report, site_files, r)
    code = EXIT_FAILED if report.fails(fail_on.value) else EXIT_OK
    present(DoctorView(doc, report, fail_on.value, code, site_files, lacking, verbose,
                       unicode="utf" in (getattr(sys.stdout, "encoding", None) or "").lower()), fmt, r)
    raise typer.Exit(code)
