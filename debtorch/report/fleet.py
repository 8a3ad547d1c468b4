"""The fleet's report: pure functions from a :class:`~debtorch.fleet.compare.Summary` to text or JSON.

The text follows the doctor's face: a summary of the nodes (how many were
expected, compared, identical), then a section per kind of finding with a
mark, each finding's groups of nodes (their names compressed as Slurm host
lists) and its fix, then one summary line.  At most :data:`MAX_GROUPS` values
are listed per finding; ``--json`` lists them all.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from debtorch.findings import ERROR, INFO, WARNING
from debtorch.fleet import probe as fleet_probe
from debtorch.fleet.compare import SECTIONS, FleetFinding, Summary, compressed
from debtorch.report import Format, document, plural
from debtorch.report.console import Line
from debtorch.report.redact import Redactor

SCHEMA_VERSION = 1
MAX_GROUPS = 6
MAX_NAMES = 120      # characters of a compressed node list in the text view


def _names(names: Iterable[str]) -> str:
    text = compressed(tuple(names))
    if len(text) <= MAX_NAMES:
        return text
    return text[: MAX_NAMES - 3].rsplit(",", 1)[0] + ",..."


def headline(s: Summary) -> List[str]:
    compared = s.compared
    lines = [f"debtorch fleet: {plural(s.expected, 'node')} expected, {len(compared)} compared"]
    if not s.identical:
        return lines
    names, _ = s.identical[0]
    if len(s.identical) == 1:
        if len(names) > 1:
            lines.append(f"  all {len(names)} identical: {_names(names)}")
        else:
            lines.append(f"  {_names(names)}")
        return lines
    lines.append(f"  {len(names)} identical: {_names(names)}")
    rest = s.identical[1:]
    shown = rest[:MAX_GROUPS]
    for group, what in shown:
        aspects = ", ".join(what[:6])
        if len(what) > 6:
            aspects += ", ..."
        lines.append(f"  {len(group)} differ{'s' if len(group) == 1 else ''}: {_names(group)} ({aspects})")
    if len(rest) > len(shown):
        more = sum(len(g) for g, _ in rest[len(shown):])
        lines.append(f"  ... {len(rest) - len(shown)} more groups ({plural(more, 'node')})")
    return lines


def _level(found: List[FleetFinding]) -> Optional[str]:
    """A section's level: its worst finding's, error or warning; None when it has neither."""
    if any(f.level == ERROR for f in found):
        return ERROR
    if any(f.level == WARNING for f in found):
        return WARNING
    return None


def _section_head(key: str, title: str, level: Optional[str], shown: List[FleetFinding], marks: Dict[str, str]) -> str:
    """``[mark] title: N findings``, or ``: no differences`` for a comparison that found none."""
    head = f"[{marks[level] if level else marks['ok']}] {title}"
    if shown:
        return f"{head}: {plural(len(shown), 'finding')}"
    if key in ("consistency", "network"):
        return f"{head}: no differences"
    return head


def lines(s: Summary, marks: Dict[str, str], verbose: bool = False,
          probe_lines: Optional[List[str]] = None) -> List[Line]:
    """The text report, as :class:`~debtorch.report.console.Line` s with their kinds.  ``marks``
    maps ok/warning/error/info to the characters to print."""
    out = [Line(x) for x in headline(s)] + [Line("")]
    by_section: Dict[str, List[FleetFinding]] = {}
    for f in s.findings:
        by_section.setdefault(f.section, []).append(f)
    for key, title in SECTIONS:
        found = by_section.get(key, [])
        if key == "probe" and probe_lines is None and not found:
            continue
        level = _level(found)
        shown = [f for f in found if verbose or f.level != INFO]
        out.append(Line(_section_head(key, title, level, shown, marks), level or "ok"))
        if key == "probe" and probe_lines:
            out.extend(Line("    " + x) for x in probe_lines)
        for f in shown:
            out.append(Line(f"    {marks[f.level]} {f.finding.message} ({f.id})", f.level))
            width = max((len(str(len(g.nodes))) for g in f.groups[:MAX_GROUPS]), default=1)
            for g in f.groups[:MAX_GROUPS]:
                out.append(Line(f"        {len(g.nodes):>{width}} {'node ' if len(g.nodes) == 1 else 'nodes'}  "
                                f"{g.value}: {_names(g.nodes)}"))
            if len(f.groups) > MAX_GROUPS:
                more = sum(len(g.nodes) for g in f.groups[MAX_GROUPS:])
                out.append(Line(f"        ... {len(f.groups) - MAX_GROUPS} more values on {plural(more, 'node')} "
                                "(--json lists them)"))
            if f.finding.fix:
                first, *rest = f.finding.fix.splitlines()
                out.append(Line(f"      fix: {first}"))
                out.extend(Line(f"           {more}") for more in rest)
    out.append(Line(""))
    errors, warnings = s.count(ERROR), s.count(WARNING)
    if errors or warnings:
        parts = [plural(n, word) for n, word in ((errors, "error"), (warnings, "warning")) if n]
        out.append(Line(f"{marks['warning']} Fleet found {' and '.join(parts)}."))
    else:
        out.append(Line(f"{marks['info']} No differences between the nodes."))
    return out


def to_json(s: Summary, fail_on: str, probe: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    out = document(
        SCHEMA_VERSION,
        exit_code=s.exit_code(fail_on),
        fail_on=fail_on,
        nodes={
            "expected": s.expected,
            "compared": len(s.compared),
            "groups": [{"count": len(names), "nodes": compressed(tuple(names)), "differs_in": what}
                       for names, what in s.identical],
            "not_compared": [{"name": n.name, "rank": n.rank, "status": n.status, "detail": n.detail}
                             for n in s.nodes if not n.ok],
        },
        summary={"errors": s.count(ERROR), "warnings": s.count(WARNING), "infos": s.count(INFO)},
        findings=[f.to_json() for f in s.findings],
    )
    if probe is not None:
        out["probe"] = probe
    if s.skipped:
        out["skipped"] = [x.to_json() for x in s.skipped]
    return out


class FleetView:
    """``debtorch fleet``: the nodes, the findings by section and the probe; or one object."""

    formats = (Format.text, Format.json)

    def __init__(self, summary: Summary, fail_on: str, verdict: Optional[fleet_probe.Verdict] = None,
                 notes: Iterable[str] = (), verbose: bool = False, marks: Optional[Dict[str, str]] = None,
                 redactor: Optional[Redactor] = None) -> None:
        self.summary, self.fail_on, self.verdict, self.notes = summary, fail_on, verdict, list(notes)
        self.verbose, self.marks, self.redactor = verbose, marks, redactor

    def lines(self) -> List[Line]:
        if self.verdict is not None:
            probe_lines: Optional[List[str]] = fleet_probe.lines(self.verdict)
        else:  # no probe run: its notes (why not), if any
            probe_lines = self.notes or None
        out = lines(self.summary, self.marks or {}, verbose=self.verbose, probe_lines=probe_lines)
        if self.redactor is not None:
            out = [Line(self.redactor.text(x.text), x.kind) for x in out]
        return out

    def document(self) -> Dict[str, Any]:
        out = to_json(self.summary, self.fail_on, self.verdict.to_json() if self.verdict is not None else None)
        if self.notes:
            out["notes"] = self.notes
        return self.redactor.walk(out) if self.redactor is not None else out
