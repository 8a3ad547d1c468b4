"""The man page debtorch(1) and the bash completion, generated from the CLI itself.

    python3 -m debtorch.cli.manpage [-o debtorch.1]      # roff
    python3 -m debtorch.cli.manpage --bash -o debtorch   # bash completion script

Both walk typer's command tree, so every command and option is documented and completed without
hand edits (debian/rules runs this).  The tree is read only through attributes that Debian 12's
typer 0.7 (click 8.1) and current typer (its own click) both have; click is never imported.  The
page's date is ``SOURCE_DATE_EPOCH`` when set, so that two builds give the same bytes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import enum
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import typer
import typer.main

from debtorch import knowledge, outputs
from debtorch.__about__ import __version__
from debtorch.cli import app as debtorch_app
from debtorch.cli.shared import EXIT_CODES
from debtorch.doctor import siteconfig
from debtorch.fleet import rendezvous

PROG = "debtorch"

# click's objects as typer hands them: click's own on Debian 12's typer 0.7, typer._click on current
# typer.  No name covers both, so they stay untyped here; the page reads them only through attributes
# that both have (see above).
ClickObject = Any


@dataclass
class Param:
    """One option or argument as a user types it."""

    names: List[str]  # ["-f", "--format"]; an argument has its metavar here
    metavar: str  # "PATH", "[text|json]"; "" for a flag
    help: str
    choices: List[str] = field(default_factory=list)
    default: Optional[str] = None
    required: bool = False
    argument: bool = False


@dataclass
class Command:
    """One command of the tree; ``path`` is () for ``debtorch`` itself."""

    path: Tuple[str, ...]
    usage: str
    help: str
    params: List[Param]  # options first, then arguments
    subcommands: List[str]  # names, for a group

    @property
    def options(self) -> List[Param]:
        return [p for p in self.params if not p.argument]


_CHOICES = re.compile(r"^[\[<{]([^\]>}]*\|[^\]>}]*)[\]>}]$")


def _long(name: str) -> bool:
    """Not a short name (``-f``): --help lists the short ones first."""
    return not re.match(r"^-[^-]", name)


def _param(p: ClickObject, ctx: ClickObject) -> Param:
    argument = getattr(p, "param_type_name", "option") == "argument"
    names = list(p.opts) + list(getattr(p, "secondary_opts", None) or [])
    names = sorted(names, key=_long)  # short names first, as --help prints them (a stable sort)
    is_flag = bool(getattr(p, "is_flag", False)) and not argument
    metavar = p.metavar or ""
    if argument:
        names, metavar = [metavar or (p.name or "ARG").upper()], ""
    elif not is_flag and not metavar:
        # The help record's first column is "-f, --format [text|json]": what is left after the
        # names is the metavar this typer prints.
        try:
            first = (p.get_help_record(ctx) or [""])[0]
        except Exception:  # a typer we do not know: fall back to the name
            first = ""
        for n in sorted(names, key=len, reverse=True):
            first = first.replace(n, "")
        metavar = first.strip(" ,") or (p.name or "VALUE").upper()
    elif is_flag:
        metavar = ""
    m = _CHOICES.match(metavar)
    choices = [c.strip() for c in m.group(1).split("|")] if m else []
    d = getattr(p, "default", None)
    default = None
    if not is_flag and d is not None and not callable(d) and d != () and d != []:
        default = str(d.value if isinstance(d, enum.Enum) else d)
    return Param(names=names, metavar=metavar, help=_clean_help(getattr(p, "help", None) or ""), choices=choices,
                 default=default, required=bool(getattr(p, "required", False)), argument=argument)


def _clean_help(text: str) -> str:
    """Help text as paragraphs: click's \\b markers and indentation dropped."""
    return "\n".join(line for line in inspect.cleandoc(text or "").splitlines() if line.strip() != "\b")


def _is_argument(p: Param) -> bool:
    return p.argument


def walk(app: Optional[typer.Typer] = None) -> List[Command]:
    """Every visible command, depth first, in the order debtorch/cli registers them."""
    out: List[Command] = []

    def visit(cmd: ClickObject, path: Tuple[str, ...], parent_ctx: ClickObject) -> None:
        ctx = cmd.context_class(cmd, info_name=path[-1] if path else PROG, parent=parent_ctx)
        params = []
        for p in cmd.get_params(ctx):
            if getattr(p, "hidden", False) or (path and list(p.opts) == ["--help"]):  # --help: once is enough
                continue
            params.append(_param(p, ctx))
        params.sort(key=_is_argument)  # options first
        subs = getattr(cmd, "commands", None) or {}
        visible = [n for n, c in subs.items() if not getattr(c, "hidden", False)]
        usage = " ".join([PROG, *path, *cmd.collect_usage_pieces(ctx)])
        out.append(Command(path=path, usage=usage, help=_clean_help(cmd.help or ""), params=params, subcommands=visible))
        for name in visible:
            visit(subs[name], path + (name,), ctx)

    visit(typer.main.get_command(app or debtorch_app), (), None)
    return out


def _summary(app: Optional[typer.Typer] = None) -> str:
    """The NAME line: the top-level callback's docstring, else the app's help."""
    app = app or debtorch_app
    cb = getattr(getattr(app, "registered_callback", None), "callback", None)
    text = (cb.__doc__ or "").strip() if cb is not None else ""
    text = (text or getattr(getattr(app, "info", None), "help", None) or PROG).strip().splitlines()[0]
    return re.sub(rf"^{PROG}\s*[:\-]\s*", "", text).rstrip(".")


# --------------------------------------------------------------------------
# roff


def _roff_text(text: str) -> str:
    """Plain text for a roff body: backslashes, leading dots and option dashes escaped."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![\w-])-(?=[-\w])", r"\\-", text)
    text = re.sub(r"(?<=\\-)-", r"\\-", text)
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.splitlines())


def _roff_paragraphs(text: str) -> List[str]:
    return [_roff_text(" ".join(p.split())) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def _roff_param(p: Param) -> List[str]:
    if p.argument:
        names = "\\fI" + _roff_text(p.names[0]) + "\\fR"
    else:
        names = ", ".join("\\fB" + _roff_text(n) + "\\fR" for n in p.names)
        if p.metavar:
            names += " \\fI" + _roff_text(p.metavar) + "\\fR"
    notes = []
    if p.default is not None:
        notes.append(f"default: {p.default}")
    if p.required:
        notes.append("required")
    body = " ".join(_clean_help(p.help).split())
    if notes:
        body = (body + " " if body else "") + "[" + "; ".join(notes) + "]"
    return [".TP", names, _roff_text(body) if body else "\\&"]


def _quote(text: str) -> str:
    return '"' + _roff_text(text).replace('"', '\\(dq') + '"'


def build_date(environ: Optional[Mapping[str, str]] = None) -> str:
    epoch = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH")
    try:
        stamp = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch else None
    except (ValueError, OverflowError, OSError):
        stamp = None
    return (stamp or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d")


def _first_line(doc: Optional[str]) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].replace("``", "").split())


def known_files() -> List[Tuple[str, str]]:
    """[(path, what)] of the files debtorch reads, from the modules that read them."""
    return [(str(knowledge.SYSTEM_DIR), _first_line(knowledge.__doc__)),
            (str(siteconfig.SYSTEM_PATH), _first_line(siteconfig.__doc__) + " Optional."),
            ("~/.cache/debtorch", _first_line(outputs.cache_dir.__doc__) + " Safe to delete.")]


def known_environment() -> List[Tuple[str, str]]:
    """[(variable, what)] that change where debtorch looks."""
    return [("VIRTUAL_ENV", "Set by an activated venv: its python is the default interpreter whose PyTorch is inspected."),
            (knowledge.ENV_DIR, f"A folder to read the doctor's data files from instead of {knowledge.SYSTEM_DIR}."),
            ("DEBTORCH_CACHE", "The folder to keep what debtorch can rebuild in, instead of $XDG_CACHE_HOME/debtorch "
                               "or ~/.cache/debtorch."),
            *rendezvous.ENVIRONMENT]


def render_man(commands: Optional[List[Command]] = None, *, version: Optional[str] = None,
               summary: Optional[str] = None, exits: Optional[Sequence[Tuple[int, str]]] = None,
               date: Optional[str] = None) -> str:
    """debtorch(1) as roff."""
    commands = walk() if commands is None else commands
    root, subs = commands[0], commands[1:]
    out = ['.\\" debtorch(1), generated by "python3 -m debtorch.cli.manpage" from the CLI; do not edit.',
           f".TH DEBTORCH 1 {date or build_date()} {_quote(PROG + ' ' + (version or __version__))} \"User Commands\"",
           ".SH NAME", f"{PROG} \\- {_roff_text(_summary() if summary is None else summary)}", ".SH SYNOPSIS"]
    for cmd in commands:
        if cmd.subcommands and cmd.path:
            continue  # a group's commands are listed one by one
        pieces = cmd.usage.split()
        name, rest = " ".join(pieces[: 1 + len(cmd.path)]), " ".join(pieces[1 + len(cmd.path):])
        out.append(".B " + _roff_text(name))
        if rest:
            out.append(_roff_text(rest))
        out.append(".br")
    out[-1:] = [".SH DESCRIPTION"]
    for i, para in enumerate(_roff_paragraphs(root.help)):
        out += ([".PP"] if i else []) + [para]
    if subs:
        out.append(".PP\nCommands:")
        for cmd in subs:
            out += [".TP", "\\fB" + _roff_text(" ".join(cmd.path)) + "\\fR", (_roff_paragraphs(cmd.help) or ["\\&"])[0]]
    out.append(".SH OPTIONS")
    for p in root.params:
        out += _roff_param(p)
    out.append(".PP\nEvery command also accepts \\fB\\-\\-help\\fR.")
    if subs:
        out.append(".SH COMMANDS")
    for cmd in subs:
        out.append(".SS " + _quote(cmd.usage))
        for i, para in enumerate(_roff_paragraphs(cmd.help)):
            out += ([".PP"] if i else []) + [para]
        for p in cmd.params:
            out += _roff_param(p)
    exits = EXIT_CODES if exits is None else exits
    sections = (("EXIT STATUS", [(f"\\fB{code}\\fR", what) for code, what in exits]),
                ("FILES", [(".I " + _roff_text(path), what) for path, what in known_files()]),
                ("ENVIRONMENT", [(".B " + _roff_text(name), what) for name, what in known_environment()]))
    for title, rows in sections:
        if rows:
            out.append(".SH " + title)
        for head, what in rows:
            out += [".TP", head, _roff_text(what)]
    out += [".SH SEE ALSO", "The documents under", ".IR /usr/share/doc/debtorch/ ."]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# bash completion

_BASH = """\
# bash completion for debtorch(1)
# Generated by "python3 -m debtorch.cli.manpage --bash" from the CLI; do not edit.

_debtorch()
{
    local cur prev words cword split
    _init_completion -s || return

    # The command path typed so far ("", "facts", ...).
    local cmd="" i w
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        [[ $w == -* ]] && continue
        case "${cmd:+$cmd }$w" in
@PATHS@        esac
    done

    # Values of options that take one.
    case "$cmd:$prev" in
@VALUES@    esac
    $split && return

    local opts="" subs=""
    case "$cmd" in
@OPTS@    esac
    if [[ $cur == -* || -z $subs ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    fi
} &&
    complete -F _debtorch debtorch

# ex: filetype=sh
"""


def _sh_case_pattern(text: str) -> str:
    return re.sub(r"([^\w./:=-])", r"\\\1", text)


def _completion(p: Param) -> str:
    """What bash offers for the value of option ``p``."""
    if p.choices:
        return f'COMPREPLY=($(compgen -W "{" ".join(p.choices)}" -- "$cur"))'
    if p.metavar.upper() in ("DIR", "DIRECTORY", "FOLDER"):
        return "_filedir -d"
    return "_filedir" if p.metavar.upper() in ("PATH", "FILE", "FILENAME", "<PATH>", "<FILE>") else "COMPREPLY=()"


def render_bash(commands: Optional[List[Command]] = None) -> str:
    """A static bash completion script for the command tree."""
    commands = walk() if commands is None else commands
    paths = "|".join(_sh_case_pattern(" ".join(c.path)) for c in commands if c.path)
    values, opts = "", ""
    for cmd in commands:
        key = " ".join(cmd.path)
        for p in cmd.options:
            if p.metavar:
                pat = "|".join(_sh_case_pattern(f"{key}:{n}") for n in p.names)
                values += f"        {pat})\n            {_completion(p)}\n            return ;;\n"
        names = [n for p in cmd.options for n in p.names] + (["--help"] if cmd.path else [])
        opts += f'        {_sh_case_pattern(key) if key else chr(34) * 2})\n            opts="{" ".join(names)}"\n'
        if cmd.subcommands:
            opts += f'            subs="{" ".join(cmd.subcommands)}"\n'
        opts += "            ;;\n"
    paths = f'            {paths})\n                cmd="${{cmd:+$cmd }}$w" ;;\n' if paths else ""
    return _BASH.replace("@PATHS@", paths).replace("@VALUES@", values).replace("@OPTS@", opts)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m debtorch.cli.manpage", description="Write debtorch(1) or its bash completion, from the CLI.")
    ap.add_argument("--bash", action="store_true", help="write the bash completion script instead of the man page")
    ap.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    args = ap.parse_args(argv)
    text = render_bash() if args.bash else render_man()
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        outputs.write_atomic(args.output, text, force=True)
    except outputs.OutputError as exc:
        print(f"debtorch.cli.manpage: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
