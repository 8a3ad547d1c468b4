"""The man page debtorch(1) and the bash completion, generated from the CLI itself.

    python3 -m debtorch.cli.manpage                      # roff on stdout
    python3 -m debtorch.cli.manpage -o debtorch.1
    python3 -m debtorch.cli.manpage --bash -o debtorch   # bash completion script

Both walk typer's command tree (``typer.main.get_command(app)``), so every
command and option that ``debtorch/cli`` registers is documented and
completed without hand edits; the .deb build runs this (debian/rules).

The tree is read only through attributes that Debian 12's typer 0.7 (on
click 8.1) and current typer (which vendors its own click) both have:
``name``, ``help``, ``hidden``, ``params``, ``commands``, ``context_class``,
``collect_usage_pieces`` and, per parameter, ``opts``, ``secondary_opts``,
``is_flag``, ``metavar``, ``default``, ``required``, ``get_help_record``.
click is never imported.

The date in the page is ``SOURCE_DATE_EPOCH`` when set (dpkg-buildpackage
sets it from debian/changelog), so two builds give the same bytes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import enum
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

import typer.main

from debtorch import knowledge, outputs
from debtorch.__about__ import __version__
from debtorch.cli import app as debtorch_app
from debtorch.cli.shared import EXIT_CODES
from debtorch.doctor import siteconfig
from debtorch.fleet import rendezvous

PROG = "debtorch"


@dataclass
class Param:
    """One option or argument as a user types it."""

    names: list  # ["-f", "--format"]; an argument has its metavar here
    metavar: str  # "PATH", "[text|json]"; "" for a flag
    help: str
    choices: list = field(default_factory=list)
    default: Optional[str] = None
    required: bool = False
    argument: bool = False


@dataclass
class Command:
    """One command of the tree; ``path`` is () for ``debtorch`` itself."""

    path: tuple
    usage: str
    help: str
    params: list  # of Param: options first, then arguments
    subcommands: list  # names, for a group

    @property
    def options(self) -> list:
        return [p for p in self.params if not p.argument]


# --------------------------------------------------------------------------
# Reading the tree


def _click_root(app=None):
    return typer.main.get_command(app or debtorch_app)


def _context(cmd, name: str, parent=None):
    return cmd.context_class(cmd, info_name=name, parent=parent)


_CHOICES = re.compile(r"^[\[<{]([^\]>}]*\|[^\]>}]*)[\]>}]$")


def _param(p, ctx) -> Param:
    argument = getattr(p, "param_type_name", "option") == "argument"
    names = list(p.opts) + list(getattr(p, "secondary_opts", None) or [])
    # Short names first, as --help prints them.
    names = [n for _, n in sorted(enumerate(names), key=lambda t: (not re.match(r"^-[^-]", t[1]), t[0]))]
    is_flag = bool(getattr(p, "is_flag", False)) and not argument
    metavar = ""
    if argument:
        metavar = p.metavar or (p.name or "ARG").upper()
    elif not is_flag:
        metavar = p.metavar or ""
        if not metavar:
            # The help record's first column is "-f, --format [text|json]":
            # what is left after the names is the metavar this typer prints.
            try:
                rec = p.get_help_record(ctx)
            except Exception:  # a typer we do not know: fall back to the name
                rec = None
            first = rec[0] if rec else ""
            for n in sorted(names, key=len, reverse=True):
                first = first.replace(n, "")
            metavar = first.strip(" ,") or (p.name or "VALUE").upper()
    if argument:
        names, metavar = [metavar], ""
    m = _CHOICES.match(metavar)
    choices = [c.strip() for c in m.group(1).split("|")] if m else []
    default = None
    d = getattr(p, "default", None)
    if not is_flag and d is not None and not callable(d) and d != () and d != []:
        default = str(d.value if isinstance(d, enum.Enum) else d)
    return Param(
        names=names,
        metavar=metavar,
        help=_clean_help(getattr(p, "help", None) or ""),
        choices=choices,
        default=default,
        required=bool(getattr(p, "required", False)),
        argument=argument,
    )


def _clean_help(text: str) -> str:
    """Help text as paragraphs: click's \\b markers and indentation dropped."""
    import inspect

    text = inspect.cleandoc(text or "")
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b")


def walk(app=None) -> list:
    """Every visible command, depth first, in the order debtorch/cli registers them."""
    root = _click_root(app)
    out: list = []

    def visit(cmd, path: tuple, parent_ctx) -> None:
        ctx = _context(cmd, path[-1] if path else PROG, parent_ctx)
        params = []
        for p in cmd.get_params(ctx):
            if getattr(p, "hidden", False):
                continue
            if path and list(p.opts) == ["--help"]:
                continue  # once, on the top level, is enough
            params.append(_param(p, ctx))
        params.sort(key=lambda q: q.argument)
        subs = getattr(cmd, "commands", None)
        visible = [n for n, c in (subs or {}).items() if not getattr(c, "hidden", False)]
        usage = " ".join([PROG, *path, *cmd.collect_usage_pieces(ctx)])
        out.append(Command(path=path, usage=usage, help=_clean_help(cmd.help or ""), params=params, subcommands=visible))
        for name in visible:
            visit(subs[name], path + (name,), ctx)

    visit(root, (), None)
    return out


def _summary(app=None) -> str:
    """The NAME line: the top-level callback's docstring, else the app's help."""
    app = app or debtorch_app
    text = ""
    cb = getattr(getattr(app, "registered_callback", None), "callback", None)
    if cb is not None and cb.__doc__:
        text = cb.__doc__.strip().splitlines()[0]
    if not text:
        text = (getattr(getattr(app, "info", None), "help", None) or PROG).strip().splitlines()[0]
    text = re.sub(rf"^{PROG}\s*[:\-]\s*", "", text).rstrip(".")
    return text


# --------------------------------------------------------------------------
# roff


def _roff_text(text: str) -> str:
    """Plain text for a roff body: backslashes, leading dots and option dashes escaped."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![\w-])-(?=[-\w])", r"\\-", text)
    text = re.sub(r"(?<=\\-)-", r"\\-", text)
    out = []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _roff_paragraphs(text: str) -> list:
    paras = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return [_roff_text(" ".join(p.split())) for p in paras]


def _roff_names(p: Param) -> str:
    if p.argument:
        return "\\fI" + _roff_text(p.names[0]) + "\\fR"
    names = ", ".join("\\fB" + _roff_text(n) + "\\fR" for n in p.names)
    if p.metavar:
        names += " \\fI" + _roff_text(p.metavar) + "\\fR"
    return names


def _roff_param(p: Param) -> list:
    lines = [".TP", _roff_names(p)]
    body = " ".join(_clean_help(p.help).split())
    notes = []
    if p.default is not None:
        notes.append(f"default: {p.default}")
    if p.required:
        notes.append("required")
    if notes:
        body = (body + " " if body else "") + "[" + "; ".join(notes) + "]"
    lines.append(_roff_text(body) if body else "\\&")
    return lines


def _quote(text: str) -> str:
    return '"' + _roff_text(text).replace('"', '\\(dq') + '"'


def build_date(environ=None) -> str:
    environ = os.environ if environ is None else environ
    epoch = environ.get("SOURCE_DATE_EPOCH")
    try:
        stamp = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch else None
    except (ValueError, OverflowError, OSError):
        stamp = None
    return (stamp or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d")


def _first_line(doc: Optional[str]) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].replace("``", "").split())


def known_files() -> list:
    """[(path, what)] of the files debtorch reads, from the modules that read them."""
    return [(str(knowledge.SYSTEM_DIR), _first_line(knowledge.__doc__)),
            (str(siteconfig.SYSTEM_PATH), _first_line(siteconfig.__doc__) + " Optional."),
            ("~/.cache/debtorch", _first_line(outputs.cache_dir.__doc__) + " Safe to delete.")]


def known_environment() -> list:
    """[(variable, what)] that change where debtorch looks."""
    return [("VIRTUAL_ENV", "Set by an activated venv: its python is the default interpreter whose PyTorch is inspected."),
            (knowledge.ENV_DIR, f"A folder to read the doctor's data files from instead of {knowledge.SYSTEM_DIR}."),
            ("DEBTORCH_CACHE", "The folder to keep what debtorch can rebuild in, instead of $XDG_CACHE_HOME/debtorch "
                               "or ~/.cache/debtorch."),
            *rendezvous.ENVIRONMENT]


def render_man(commands: Optional[list] = None, *, version: Optional[str] = None, summary: Optional[str] = None,
               exits: Optional[list] = None, date: Optional[str] = None, files: Optional[list] = None,
               environment: Optional[list] = None) -> str:
    """debtorch(1) as roff."""
    if commands is None:
        commands = walk()
    version = __version__ if version is None else version
    if summary is None:
        summary = _summary()
    exits = list(EXIT_CODES) if exits is None else exits
    date = date or build_date()
    root, subs = commands[0], commands[1:]

    out = [
        '.\\" debtorch(1), generated by "python3 -m debtorch.cli.manpage" from the CLI; do not edit.',
        f".TH DEBTORCH 1 {date} {_quote(PROG + ' ' + version)} \"User Commands\"",
        ".SH NAME",
        f"{PROG} \\- {_roff_text(summary)}",
        ".SH SYNOPSIS",
    ]
    for cmd in commands:
        if cmd.subcommands and cmd.path:
            continue  # a group's commands are listed one by one
        pieces = cmd.usage.split()
        line = ".B " + _roff_text(" ".join(pieces[: 1 + len(cmd.path)]))
        rest = " ".join(pieces[1 + len(cmd.path):])
        out += [line, _roff_text(rest)] if rest else [line]
        out.append(".br")
    if out[-1] == ".br":
        out.pop()
    out.append(".SH DESCRIPTION")
    for i, para in enumerate(_roff_paragraphs(root.help)):
        out += ([".PP"] if i else []) + [para]
    if subs:
        out.append(".PP")
        out.append("Commands:")
        for cmd in subs:
            out += [".TP", "\\fB" + _roff_text(" ".join(cmd.path)) + "\\fR"]
            first = _roff_paragraphs(cmd.help)
            out.append(first[0] if first else "\\&")
    out.append(".SH OPTIONS")
    for p in root.params:
        out += _roff_param(p)
    out.append(".PP")
    out.append("Every command also accepts \\fB\\-\\-help\\fR.")
    if subs:
        out.append(".SH COMMANDS")
    for cmd in subs:
        out.append(".SS " + _quote(cmd.usage))
        for i, para in enumerate(_roff_paragraphs(cmd.help)):
            out += ([".PP"] if i else []) + [para]
        for p in cmd.params:
            out += _roff_param(p)
    if exits:
        out.append(".SH EXIT STATUS")
        for code, meaning in exits:
            out += [".TP", f"\\fB{code}\\fR", _roff_text(meaning)]
    files = known_files() if files is None else files
    if files:
        out.append(".SH FILES")
        for path, what in files:
            out += [".TP", ".I " + _roff_text(path), _roff_text(what)]
    envs = known_environment() if environment is None else environment
    if envs:
        out.append(".SH ENVIRONMENT")
        for name, what in envs:
            out += [".TP", ".B " + _roff_text(name), _roff_text(what)]
    out += [
        ".SH SEE ALSO",
        "The documents under",
        ".IR /usr/share/doc/debtorch/ .",
    ]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# bash completion


def _sh_words(words) -> str:
    return " ".join(words)


def _sh_case_pattern(text: str) -> str:
    return re.sub(r"([^\w./:=-])", r"\\\1", text)


def render_bash(commands: Optional[list] = None) -> str:
    """A static bash completion script for the command tree."""
    if commands is None:
        commands = walk()
    paths = [" ".join(c.path) for c in commands if c.path]
    lines = [
        "# bash completion for debtorch(1)",
        '# Generated by "python3 -m debtorch.cli.manpage --bash" from the CLI; do not edit.',
        "",
        "_debtorch()",
        "{",
        "    local cur prev words cword split",
        "    _init_completion -s || return",
        "",
        "    # The command path typed so far (\"\", \"facts\", ...).",
        '    local cmd="" i w',
        "    for ((i = 1; i < cword; i++)); do",
        '        w=${words[i]}',
        "        [[ $w == -* ]] && continue",
        '        case "${cmd:+$cmd }$w" in',
    ]
    if paths:
        lines.append("            " + "|".join(_sh_case_pattern(p) for p in paths) + ')')
        lines.append('                cmd="${cmd:+$cmd }$w" ;;')
    lines += [
        "        esac",
        "    done",
        "",
        "    # Values of options that take one.",
        '    case "$cmd:$prev" in',
    ]
    for cmd in commands:
        key = " ".join(cmd.path)
        for p in cmd.options:
            if not p.metavar:
                continue
            pat = "|".join(_sh_case_pattern(f"{key}:{n}") for n in p.names)
            if p.choices:
                action = f'COMPREPLY=($(compgen -W "{_sh_words(p.choices)}" -- "$cur"))'
            elif p.metavar.upper() in ("DIR", "DIRECTORY", "FOLDER"):
                action = "_filedir -d"
            elif p.metavar.upper() in ("PATH", "FILE", "FILENAME", "<PATH>", "<FILE>"):
                action = "_filedir"
            else:
                action = "COMPREPLY=()"
            lines.append(f"        {pat})")
            lines.append(f"            {action}")
            lines.append("            return ;;")
    lines += [
        "    esac",
        "    $split && return",
        "",
        '    local opts="" subs=""',
        '    case "$cmd" in',
    ]
    for cmd in commands:
        key = " ".join(cmd.path)
        names = [n for p in cmd.options for n in p.names]
        if cmd.path:
            names.append("--help")
        lines.append(f'        {_sh_case_pattern(key) if key else chr(34) + chr(34)})')
        lines.append(f'            opts="{_sh_words(names)}"')
        if cmd.subcommands:
            lines.append(f'            subs="{_sh_words(cmd.subcommands)}"')
        lines.append("            ;;")
    lines += [
        "    esac",
        '    if [[ $cur == -* || -z $subs ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -W "$subs" -- "$cur"))',
        "    fi",
        "} &&",
        "    complete -F _debtorch debtorch",
        "",
        "# ex: filetype=sh",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Entry point


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m debtorch.cli.manpage", description="Write debtorch(1) or its bash completion, from the CLI.")
    ap.add_argument("--bash", action="store_true", help="write the bash completion script instead of the man page")
    ap.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    args = ap.parse_args(argv)
    text = render_bash() if args.bash else render_man()
    if args.output:
        try:
            outputs.write_atomic(args.output, text, force=True)
        except outputs.OutputError as exc:
            print(f"debtorch.cli.manpage: {exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
