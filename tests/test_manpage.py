"""debtorch(1) and the bash completion, generated from the CLI (debtorch/cli/manpage.py).

The tree is enumerated here independently of the generator, straight from
typer, so a command or option the generator drops is caught.
"""

import enum
import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
import typer.main
from hypothesis import given
from hypothesis import strategies as st

from debtorch.__about__ import __version__
from debtorch.cli import app, manpage
from debtorch.cli.shared import EXIT_CODES

BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
INSTALLED_PAGE = Path("/usr/share/man/man1/debtorch.1.gz")


def registered(typer_app):
    """{("facts",): {"--json", ...}, (): {"--version", ...}} for every visible command."""
    out = {}

    def visit(cmd, path):
        names = set()
        for p in cmd.params:
            if getattr(p, "hidden", False) or getattr(p, "param_type_name", "") == "argument":
                continue
            names.update(p.opts)
            names.update(getattr(p, "secondary_opts", None) or [])
        out[path] = names
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            if not getattr(sub, "hidden", False):
                visit(sub, path + (name,))

    visit(typer.main.get_command(typer_app), ())
    return out


def plain(roff):
    """roff with font changes dropped and escaped dashes as typed."""
    return re.sub(r"\\f[BIRP]", "", roff).replace("\\-", "-")


def sections(roff):
    """The page (as plain()) split at .SH/.SS headers."""
    parts, title = {}, ""
    for line in plain(roff).splitlines():
        m = re.match(r'^\.S[HS] "?(.*?)"?$', line)
        if m:
            title = m.group(1)
            parts[title] = ""
        else:
            parts[title] = parts.get(title, "") + line + "\n"
    return parts


def section_for(parts, path):
    if not path:
        return parts["OPTIONS"]
    def command_path(title):
        words = title.split()
        if words[:1] != ["debtorch"]:
            return None
        return tuple(w for w in words[1:] if re.match(r"^[a-z][a-z0-9-]*$", w))

    found = [text for title, text in parts.items() if command_path(title) == path]
    assert len(found) == 1, f"no single section for {' '.join(path)}: {list(parts)}"
    return found[0]


def demo_app():
    """A tree like the one debtorch is growing: a group, choices, a hidden option, an argument."""
    demo = typer.Typer(add_completion=False)

    class Level(str, enum.Enum):
        warning = "warning"
        error = "error"

    @demo.callback()
    def _root(version: bool = typer.Option(False, "--version", help="Print the version.")):
        """demo: a tree for the generator."""

    @demo.command("verify-train")
    def _verify(
        python: str = typer.Option(None, "--python", metavar="PATH", help="Interpreter of the venv."),
        fail_on: Level = typer.Option(Level.error, "--fail-on", help="Lowest level that fails."),
        secret: bool = typer.Option(False, "--secret", hidden=True),
    ):
        """Baseline vs tuned.

        .A line that starts with a dot, and a back\\slash.
        """

    tune = typer.Typer(help="Training settings.")

    @tune.command("show")
    def _show(config: str = typer.Argument(..., help="The config file."), force: bool = typer.Option(False, "--force/--no-force")):
        """Show a config."""

    demo.add_typer(tune, name="tune")
    return demo


def test_every_registered_command_and_option_is_in_its_section_of_the_man_page():
    roff = manpage.render_man(date="2025-01-01")
    parts = sections(roff)
    tree = registered(app)
    assert tree, "the CLI has no commands"
    for path, options in tree.items():
        text = section_for(parts, path)
        for opt in options - {"--help"}:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), f"{opt} of '{' '.join(path) or 'debtorch'}' not in the man page"
    assert f'"debtorch {__version__}"' in roff.splitlines()[1]


def test_the_man_page_names_the_files_and_variables_the_code_reads():
    from debtorch import knowledge
    from debtorch.doctor import siteconfig

    parts = sections(manpage.render_man(date="2025-01-01"))
    assert str(knowledge.SYSTEM_DIR) in parts["FILES"]
    assert siteconfig.SYSTEM_PATH in parts["FILES"]
    assert knowledge.ENV_DIR in parts["ENVIRONMENT"]
    assert "MASTER_ADDR" in parts["ENVIRONMENT"] and "SLURM_PROCID" in parts["ENVIRONMENT"]


def test_a_new_group_choices_and_arguments_appear_and_hidden_options_do_not():
    roff = manpage.render_man(manpage.walk(demo_app()), version="9", summary="s", exits=[], date="2025-01-01")
    parts = sections(roff)
    for path, options in registered(demo_app()).items():
        text = section_for(parts, path)
        for opt in options - {"--help"}:
            assert opt in text
    assert "--secret" not in roff
    assert re.search(r"^--fail-on [\[<]warning\|error[\]>]$", plain(roff), re.M)
    assert "[default: error]" in roff
    assert "CONFIG" in section_for(parts, ("tune", "show"))
    # A help line starting with a dot must not become a roff request.
    assert "\\&.A line" in roff and "back\\eslash" in roff


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_the_man_page_renders_without_groff_warnings():
    roff = manpage.render_man(date="2025-01-01")
    res = subprocess.run(["groff", "-man", "-ww", "-Tutf8", "-z"], input=roff, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_the_page_date_comes_from_SOURCE_DATE_EPOCH():
    assert manpage.build_date({"SOURCE_DATE_EPOCH": "1700000000"}) == "2023-11-14"
    assert re.match(r"\d{4}-\d\d-\d\d$", manpage.build_date({"SOURCE_DATE_EPOCH": "soon"}))


def test_every_exit_code_is_in_the_man_page_and_docs_cli_md():
    status = sections(manpage.render_man(date="2025-01-01"))["EXIT STATUS"]
    docs = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for code, meaning in EXIT_CODES:
        assert re.search(rf"(?m)^{code}$", status) and meaning in status, (code, status)
        assert f"**{code}**" in docs, f"docs/cli.md does not list exit code {code}"


@given(st.text())
def test_no_help_text_can_inject_a_roff_request(text):
    for line in manpage._roff_text(text).splitlines():
        assert not line.startswith((".", "'"))


def test_output_file_is_written_and_an_unwritable_one_is_one_line(tmp_path, capsys):
    target = tmp_path / "debtorch.1"
    assert manpage.main(["-o", str(target)]) == 0
    assert target.read_text().startswith('.\\" debtorch(1)')
    assert manpage.main(["--bash", "-o", str(tmp_path / "missing" / "debtorch")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing/debtorch" in err[0]


def complete(script, line):
    """What bash offers for ``line`` (words split on spaces; the last one is being typed)."""
    words = line.split(" ")
    driver = f"""
source {BASH_COMPLETION}
source {script}
COMP_WORDS=({" ".join(repr(w) for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE={line!r}
COMP_POINT=${{#COMP_LINE}}
_debtorch debtorch {words[-1]!r} {words[-2]!r}
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    res = subprocess.run(["bash", "--norc", "--noprofile", "-c", driver], capture_output=True, text=True, timeout=60, cwd=script.parent)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


needs_bash_completion = pytest.mark.skipif(
    not BASH_COMPLETION.exists() or shutil.which("bash") is None, reason="bash-completion is not installed"
)


@needs_bash_completion
@pytest.mark.parametrize("which", ["debtorch", "demo"])
def test_bash_completion_offers_every_command_and_option(tmp_path, which):
    typer_app = app if which == "debtorch" else demo_app()
    script = tmp_path / "completion.bash"
    script.write_text(manpage.render_bash(manpage.walk(typer_app)))
    tree = registered(typer_app)
    top = {path[0] for path in tree if len(path) == 1}
    assert complete(script, "debtorch ") == top
    for path, options in tree.items():
        offered = complete(script, " ".join(("debtorch",) + path + ("-",)))
        assert options <= offered, f"{' '.join(path)}: missing {options - offered}"


@needs_bash_completion
def test_bash_completion_completes_choices_and_paths(tmp_path):
    script = tmp_path / "completion.bash"
    script.write_text(manpage.render_bash(manpage.walk(demo_app())))
    (tmp_path / "venv").mkdir()
    assert complete(script, "debtorch verify-train --fail-on ") == {"warning", "error"}
    assert complete(script, "debtorch verify-train --python ve") == {"venv"}
    assert complete(script, "debtorch tune ") == {"show"}


@pytest.mark.skipif(
    not (INSTALLED_PAGE.exists() and str(Path(manpage.__file__).resolve()).startswith("/usr/lib/python3/dist-packages/")),
    reason="debtorch is not installed from the .deb",
)
def test_the_installed_man_page_covers_every_installed_command():
    roff = gzip.decompress(INSTALLED_PAGE.read_bytes()).decode()
    parts = sections(roff)
    for path, options in registered(app).items():
        text = section_for(parts, path)
        for opt in options - {"--help"}:
            assert opt in text, f"{opt} of '{' '.join(path)}' not in {INSTALLED_PAGE}"
