"""``debtorch doctor``: a section per area with its mark, the findings and fixes under it,
one summary line (flutter doctor's face); or one JSON object.  Pure functions, and
:class:`DoctorView`."""

from __future__ import annotations

from typing import Optional, Sequence

from debtorch.doctor import AREAS, SCHEMA_VERSION, Report
from debtorch.machine import Machine
from debtorch.report import Format, document, plural
from debtorch.report.console import Line
from debtorch.report.facts import show_value

MARKS_UNICODE = {"ok": "✓", "warning": "!", "error": "✗", "crash": "☠", "info": "•", "unknown": "?"}
MARKS_ASCII = {"ok": "+", "warning": "!", "error": "x", "crash": "#", "info": "-", "unknown": "?"}


def doctor_lines(facts: dict, report: Report, verbose: bool = False, unicode: bool = True,
                 lacking: Optional[Sequence[str]] = None, site_files: Sequence[str] = ()) -> list[Line]:
    """The flutter-doctor-style view: a section per area, fixes under each, one summary line."""
    marks = MARKS_UNICODE if unicode else MARKS_ASCII
    by_area: dict = {}
    for f in report.findings:
        by_area.setdefault(f.area, []).append(f)
    # flutter doctor's heading; under -v the details are already shown.
    lines = [Line("Doctor summary:" if verbose else "Doctor summary (debtorch doctor -v shows details):")]
    problem_areas = 0
    not_known = []
    m = Machine.from_facts(facts)
    for area in AREAS:
        found = by_area.get(area.id, [])
        if any(f.crashed for f in found):
            kind = "crash"
        elif any(f.level == "error" for f in found):
            kind = "error"
        elif any(f.level == "warning" for f in found):
            kind = "warning"
        else:
            kind = "ok"
        if kind != "ok":
            problem_areas += 1
        if area.headline is not None:
            head = area.headline_of(m)
        elif site_files:                 # the site's rules: the files read, not the machine
            head = f"rules from {', '.join(site_files)}"
        else:
            head = "no site rules"
        state = report.areas.get(area.id)
        if state is not None and not state.known and kind == "ok":
            # Unknown never looks fine: its own mark and wording (debtorch/doctor/areas.py).
            kind = "unknown"
            not_known.append(area.title)
            if head.startswith("unknown"):
                head = state.wording
            else:
                head = f"{head}; {state.wording}"
        lines.append(Line(f"[{marks[kind]}] {area.title}" + (f": {head}" if head else ""), kind))
        for f in found:
            if f.level == "info" and not verbose:
                continue
            level = "crash" if f.crashed else f.level
            about = f" [{f.about}]" if f.about and not f.crashed else ""
            lines.append(Line(f"    {marks[level]} {f.message}{about} ({f.id})", level))
            if f.fix:
                fix_lines = f.fix.splitlines()
                lines.append(Line(f"      fix: {fix_lines[0]}"))
                lines.extend(Line(f"           {x}") for x in fix_lines[1:])
            if verbose and f.facts:
                lines.append(Line("      facts: " + ", ".join(f"{k}={show_value(v)}" for k, v in f.facts)))
    if lacking:
        lines.append(Line(""))
        lines.append(Line("The input did not tell (checks that need these were skipped):"))
        lines.extend(Line(f"    - {x}") for x in lacking)
    lines.append(Line(""))
    errors, warnings_ = report.count("error"), report.count("warning")
    crashed, infos = len(report.crashed), report.count("info")
    if errors or warnings_:
        parts = [plural(n, word) for n, word in ((errors, "error"), (warnings_, "warning")) if n]
        summary = f"{marks['warning']} Doctor found {' and '.join(parts)} in {plural(problem_areas, 'area')}"
        lines.append(Line(summary + (f" ({plural(crashed, 'check')} crashed)" if crashed else "") + "."))
    else:
        found_none = "No issues found in what the input shows" if not_known else "No issues found!"
        lines.append(Line(f"{marks['info']} {found_none}"
                          + (f" ({plural(infos, 'info line')} with -v)" if infos and not verbose else "")))
    if not_known:
        lines.append(Line(f"  {marks['unknown']} Not judged: {', '.join(not_known)}.", "unknown"))
    if report.silenced:
        lines.append(Line(f"  ({len(report.silenced)} finding(s) silenced by the site config: {', '.join(sorted({f.id for f in report.silenced}))})"))
    return lines


class DoctorView:
    """``debtorch doctor``: the sections, or one object with the findings and the facts they rest on."""

    formats = (Format.text, Format.json)

    def __init__(self, facts: dict, report: Report, fail_on: str, exit_code: int, site_files: Sequence[str] = (),
                 lacking: Optional[list[str]] = None, verbose: bool = False, unicode: bool = True):
        self.facts, self.report, self.fail_on, self.exit_code = facts, report, fail_on, exit_code
        self.site_files, self.lacking, self.verbose, self.unicode = list(site_files), lacking, verbose, unicode

    def lines(self) -> list[Line]:
        return doctor_lines(self.facts, self.report, verbose=self.verbose, unicode=self.unicode,
                            lacking=self.lacking, site_files=self.site_files)

    def document(self) -> dict:
        doc = document(SCHEMA_VERSION, exit_code=self.exit_code, fail_on=self.fail_on, site_config=self.site_files,
                       **self.report.to_json(), facts=self.facts)
        if self.lacking is not None:
            doc["lacking"] = self.lacking
        return doc
