"""Score debtorch on the public corpus: files read, fields right, verdicts per class.

The corpus (docs/corpus.md) is real files from public places, each with the
fields and verdict a careful reader finds in it:

- collect_env reports, tests/corpus/collect_env/ and tests/collect_env/: read
  with debtorch's collect_env reader, judged by the doctor (in process, as
  `debtorch doctor --from-collect-env` does);
- nvidia-smi -q -x files, tests/corpus/nvidia-smi-xml/: read by the facts'
  XML reader, then replayed as a machine (`debtorch doctor --host` on a tree
  holding only that output) to prove no check crashes on them;
- os-release trees, tests/corpus/os-release/: each a fake root replayed like
  `doctor --host`, the os section collected and judged;
- cpuinfo files, tests/corpus/cpuinfo/: read by the facts' cpuinfo reader.

It prints how many files were read without error, the share of checked fields
that are right, and for the collect_env reports the precision and recall of
the verdict per class, the verdict being the class the doctor's findings imply
(CLASS_IDS below: the one place that mapping lives; docs/corpus.md explains it).

    python benchmarks/corpus_score.py              # the summary
    python benchmarks/corpus_score.py --markdown   # the tables as Markdown (benchmarks/results/corpus.md)
    python benchmarks/corpus_score.py --details    # every wrong field and verdict, per file
    python benchmarks/corpus_score.py --json
    python benchmarks/corpus_score.py --corpus DIR   # a held-out set laid out like tests/corpus
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import facts as facts_mod  # noqa: E402
from debtorch import knowledge  # noqa: E402
from debtorch.doctor import Context, diagnose  # noqa: E402
from debtorch.doctor.consistency import contradictions  # noqa: E402
from debtorch.facts import collectenv  # noqa: E402
from debtorch.facts.cpu import FEATURES, parse_cpuinfo  # noqa: E402
from debtorch.facts.nvidia import parse_smi_xml  # noqa: E402
from debtorch.findings import CRASH_ID, ERROR  # noqa: E402
from debtorch.host import ReplayHost  # noqa: E402
from debtorch.machine import Machine  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
REPORT_DIRS = (CORPUS / "collect_env", ROOT / "tests" / "collect_env")

# --- verdict classes: the one place a report's findings become its verdict ----------
#
# A report's verdict is the first class, in this order, one of whose ids the doctor
# gives; "other" is any other error (a crashed check aside); "healthy" is no error of
# these.  torch.E003 (no code for the GPU in the wheel) splits by the facts it rests
# on: a GPU older than every architecture of the wheel is "arch-too-old", else
# "arch-too-new".  Phase 2's new findings join these sets.
#
# A report can also be of class "not-shown": its author had a fault the text cannot
# show (a library's packaging bug, an AMD GPU collect_env does not list, a kernel of
# another project).  The doctor must not invent one: its right verdict there is
# "healthy", and such reports are scored as expecting it (TARGET below).
CLASSES = ("no-torch", "no-driver", "cpu-wheel", "arch-too-old", "arch-too-new", "driver-too-old", "other", "healthy")
EXPECTED_CLASSES = CLASSES + ("not-shown",)
TARGET = {"not-shown": "healthy"}
CLASS_IDS = {
    "no-torch": {"torch.E001", "torch.E005"},
    "no-driver": {"driver.E001", "driver.E002", "driver.E003", "driver.E007", "driver.E008"},
    "cpu-wheel": {"torch.E002"},
    "arch": {"torch.E003"},
    "driver-too-old": {"cuda.E001", "cuda.E002"},
}
# Settings a report is from, and the findings that say the doctor noticed.
SETTING_IDS = {"wsl": {"os.E001", "os.I003", "os.W003"}, "non-debian": {"os.I001", "os.I002"}}
NON_DEBIAN = {"ubuntu", "other-linux", "macos", "windows"}
# Findings saying PyTorch publishes no wheels for the machine's architecture (issue 10, class 6).
NO_WHEELS_IDS: set = {"cpu.W004", "cpu.I002"}


def missing_wheels(doc: dict, findings) -> int:
    """Pip lines of the findings that name a torch wheel checks/torch_wheels.toml does not list for
    the machine's architecture and Python (consistency rule 6, issue 22)."""
    return sum("no wheel for" in c or "publishes none" in c for c in contradictions(Machine.from_facts(doc), findings))


def _facts_of(finding) -> dict:
    return {k: v for k, v in finding.facts}


def class_of(ids, errors, arch_old: bool = False) -> str:
    """The verdict class of a set of finding ids (see CLASS_IDS); `errors` are those of
    level error, `arch_old` whether torch.E003's GPU is older than all of the wheel's."""
    ids = set(ids)
    for cls in CLASSES[:-2]:
        if cls.startswith("arch-"):
            if ids & CLASS_IDS["arch"] and cls == ("arch-too-old" if arch_old else "arch-too-new"):
                return cls
        elif ids & CLASS_IDS[cls]:
            return cls
    mapped = set().union(*CLASS_IDS.values())
    return "other" if set(errors) - mapped - {CRASH_ID} else "healthy"


def verdict_class(findings) -> str:
    """The verdict class the doctor's findings imply."""
    arch_old = False
    for f in findings:
        if f.id in CLASS_IDS["arch"]:
            fx = _facts_of(f)
            arch_old = bool(knowledge.older_than_all(fx.get("compute_capability"), fx.get("arch_list")))
    return class_of({f.id for f in findings}, {f.id for f in findings if f.level == ERROR}, arch_old)


def target(row: dict) -> str:
    """The verdict the doctor should reach on a report row (its class, or TARGET's stand-in)."""
    cls = row["expected"]["verdict"]["class"]
    return TARGET.get(cls, cls)


# --- reading expected files -------------------------------------------------------------

def _expected(path: Path) -> dict:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def _none(value):
    """The corpus files write "null" where TOML has no null."""
    if value == "null":
        return None
    if isinstance(value, list):
        return [_none(v) for v in value]
    return value


def resolve(doc, path: str):
    """Value at a dotted path; 'a.b[].c' maps over the list at a.b, 'a.0' indexes a list;
    'machine.x.y' is the machine view's answer (debtorch/machine/), 'machine.gpus[].cc' too."""
    parts = path.split(".")
    if parts[0] == "machine":
        doc, parts = Machine.from_facts(doc), parts[1:]
    cur, mapped = [doc], False
    for part in parts:
        many = part.endswith("[]")
        key = part[:-2] if many else part
        nxt = []
        for item in cur:
            if isinstance(item, list) and key.isdigit():
                item = item[int(key)] if int(key) < len(item) else None
            elif isinstance(item, dict):
                item = item.get(key)
            else:
                item = getattr(item, key, None) if item is not None else None
            (nxt.extend if many else nxt.append)((item or []) if many else item)
        cur, mapped = nxt, mapped or many
    return cur if mapped else cur[0]


def reason(doc, path: str):
    """Why the value at a dotted path is unknown: the nearest 'unknown' entry for it."""
    node, found = doc, None
    for part in path.split("."):
        if not isinstance(node, dict):
            break
        unk = node.get("unknown") or {}
        if part in unk:
            found = unk[part]
        elif "*" in unk and found is None:
            found = unk["*"]
        node = node.get(part)
    return found


def _fields(doc, facts: dict, unknown=(), pending=()) -> dict:
    """{'checked', 'right', 'wrong': [(path, got, want)], 'pending_right': [...]} for one file."""
    out = {"checked": 0, "right": 0, "wrong": [], "pending_right": []}
    for path, want in facts.items():
        want = _none(want)
        got = resolve(doc, path)
        out["checked"] += 1
        if got == want:
            out["right"] += 1
            if path in pending:
                out["pending_right"].append(path)
        else:
            out["wrong"].append((path, got, want))
    for path in unknown:
        out["checked"] += 1
        if resolve(doc, path) is None and reason(doc, path):
            out["right"] += 1
        else:
            out["wrong"].append((path, resolve(doc, path), "unknown, with a reason"))
    return out


# --- the four kinds -------------------------------------------------------------------

def _name(path: Path) -> str:
    """A file's name in the tables: relative to the repository, else as given (--corpus elsewhere)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def score_reports(folders=REPORT_DIRS) -> list:
    rows = []
    for folder in folders:
        for path in sorted(folder.glob("*.txt")):     # a missing folder globs nothing
            exp = _expected(path.with_suffix(".expected.toml"))
            row = {"kind": "collect_env", "file": _name(path), "expected": exp}
            try:
                doc = collectenv.parse_file(str(path))
            except collectenv.CollectEnvError as exc:
                row.update(parsed=False, error=str(exc))
                rows.append(row)
                continue
            report = diagnose(doc, Context(source="collect_env"))
            facts = dict(exp.get("facts", {}))
            facts.update({f"collect_env.{k}": v for k, v in exp.get("collect_env", {}).items() if k == "platform"})
            row.update(parsed=True, fields=_fields(doc, facts, exp.get("unknown", []), exp.get("pending_facts", [])),
                       ids=sorted({f.id for f in report.findings}), crashed=[f.message for f in report.crashed],
                       predicted=verdict_class(report.findings), container=bool((doc.get("os") or {}).get("container")),
                       no_wheel=missing_wheels(doc, report.findings))
            rows.append(row)
    return rows


def _replay_smi(xml: Path, tmp: Path) -> ReplayHost:
    root = tmp / xml.stem
    (root / "_commands").mkdir(parents=True)
    shutil.copy(xml, root / "_commands" / "smi.xml")
    meta = {"nvml": {"error": "NVML binding not installed (nvidia-ml-py / python3-pynvml)"},
            "commands": {"nvidia-smi -q -x": {"returncode": 0, "stdout_file": "smi.xml", "stderr": "", "error": None}}}
    (root / "_host.json").write_text(json.dumps(meta))
    return ReplayHost(root)


def score_smi(corpus: Path = CORPUS) -> list:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((corpus / "nvidia-smi-xml").glob("*.xml")):
            exp = _expected(path.with_suffix(".expected.toml"))
            got = parse_smi_xml(path.read_text())
            row = {"kind": "nvidia-smi-xml", "file": _name(path), "expected": exp,
                   "parsed": "error" not in got}
            if not row["parsed"]:
                row["error"] = got["error"]
                rows.append(row)
                continue
            row["fields"] = _fields(got, exp.get("facts", {}), (), exp.get("pending_facts", []))
            want_cc = _none(exp.get("knowledge", {}).get("gpus[].compute_capability", []))   # "null": not knowable
            have_cc = [knowledge.capability_for_name(g.get("name")) or knowledge.capability_for_pci_id(g.get("pci_device_id"))
                       for g in got["gpus"]]
            row["knowledge"] = {"checked": len(want_cc), "right": sum(a == b for a, b in zip(have_cc, want_cc)),
                                "wrong": [(i, a, b) for i, (a, b) in enumerate(zip(have_cc, want_cc)) if a != b]}
            doc = facts_mod.collect(_replay_smi(path, Path(tmp)), facts_mod.Options())
            report = diagnose(doc, Context(source="facts"))
            row.update(ids=sorted({f.id for f in report.findings}), crashed=[f.message for f in report.crashed],
                       gpus_seen=len((doc.get("nvidia") or {}).get("gpus") or []), no_wheel=missing_wheels(doc, report.findings))
            rows.append(row)
    return rows


def score_os(corpus: Path = CORPUS) -> list:
    rows = []
    folder = corpus / "os-release"
    for tree in sorted(p for p in (folder.iterdir() if folder.is_dir() else ()) if p.is_dir()):
        exp = _expected(tree / "expected.toml")
        doc = facts_mod.collect(ReplayHost(tree), facts_mod.Options(sections=("os",)))
        report = diagnose(doc, Context(source="facts"))
        ids = sorted(f.id for f in report.findings if f.area == "os")
        rows.append({"kind": "os-release", "file": _name(tree), "expected": exp,
                     "parsed": "*" not in ((doc.get("os") or {}).get("unknown") or {}),
                     "fields": _fields(doc, exp.get("facts", {}), (), exp.get("pending_facts", [])),
                     "ids": ids, "crashed": [f.message for f in report.crashed], "no_wheel": missing_wheels(doc, report.findings),
                     "verdict_right": set(ids) == set(exp["verdict"]["ids"])})
    return rows


def score_cpuinfo(corpus: Path = CORPUS) -> list:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = corpus / "cpuinfo"
        for path in sorted(p for p in (folder.iterdir() if folder.is_dir() else ())
                           if not p.name.endswith((".toml", ".md"))):
            exp = _expected(Path(str(path) + ".expected.toml"))
            got = dict(parse_cpuinfo(path.read_text()))
            got["features"] = sorted(f for f in FEATURES if f in got.get("flags", ()))
            root = Path(tmp) / path.name
            (root / "proc").mkdir(parents=True)
            shutil.copy(path, root / "proc" / "cpuinfo")
            (root / "_host.json").write_text(json.dumps({"machine": exp["verdict"]["arch"]}))
            doc = facts_mod.collect(ReplayHost(root), facts_mod.Options(sections=("os", "cpu")))
            report = diagnose(doc, Context(source="facts"))
            ids = {f.id for f in report.findings}
            rows.append({"kind": "cpuinfo", "file": _name(path), "expected": exp, "parsed": True,
                         "fields": _fields(got, exp.get("facts", {}), (), exp.get("pending_facts", [])),
                         "crashed": [f.message for f in report.crashed], "ids": sorted(ids),
                         "no_wheel": missing_wheels(doc, report.findings),
                         "no_wheels_flagged": bool(ids & NO_WHEELS_IDS)})
    return rows


# --- summary ------------------------------------------------------------------------------

def summarise(rows: list) -> dict:
    kinds = {}
    for r in rows:
        k = kinds.setdefault(r["kind"], {"files": 0, "parsed": 0, "checked": 0, "right": 0, "crashed": 0})
        k["files"] += 1
        k["parsed"] += bool(r["parsed"])
        if r.get("fields"):
            k["checked"] += r["fields"]["checked"]
            k["right"] += r["fields"]["right"]
        k["crashed"] += bool(r.get("crashed"))
    reports = [r for r in rows if r["kind"] == "collect_env" and r["parsed"]]
    per_class = {}
    for cls in EXPECTED_CLASSES:
        mine = [r for r in reports if r["expected"]["verdict"]["class"] == cls]
        tp = sum(1 for r in mine if r["predicted"] == target(r))
        pred = sum(1 for r in reports if r["predicted"] == cls)
        right_pred = sum(1 for r in reports if r["predicted"] == cls and target(r) == cls)
        per_class[cls] = {"expected": len(mine), "predicted": pred, "right": tp,
                          "precision": right_pred / pred if pred else None, "recall": tp / len(mine) if mine else None}
    settings = {}
    for name in ("wsl", "non-debian", "container"):
        def want(r):
            s = set(r["expected"]["verdict"].get("settings", []))
            return bool(s & NON_DEBIAN) if name == "non-debian" else name in s

        def got(r):
            return r["container"] if name == "container" else bool(set(r["ids"]) & SETTING_IDS[name])
        tp = sum(1 for r in reports if want(r) and got(r))
        settings[name] = {"expected": sum(map(want, reports)), "predicted": sum(map(got, reports)), "right": tp}
    smi = [r for r in rows if r["kind"] == "nvidia-smi-xml" and r["parsed"]]
    os_rows = [r for r in rows if r["kind"] == "os-release"]
    cpu = [r for r in rows if r["kind"] == "cpuinfo"]
    no_wheels = [r for r in cpu if not r["expected"]["verdict"]["torch_wheels"]]
    with_wheels = [r for r in cpu if r["expected"]["verdict"]["torch_wheels"]]
    return {
        "kinds": kinds,
        "verdicts": {"reports": len(reports), "right": sum(r["predicted"] == target(r) for r in reports),
                     "per_class": per_class},
        "settings": settings,
        "smi_knowledge": {"checked": sum(r["knowledge"]["checked"] for r in smi), "right": sum(r["knowledge"]["right"] for r in smi)},
        "os_verdicts": {"trees": len(os_rows), "right": sum(r["verdict_right"] for r in os_rows)},
        "cpu_no_wheels": {"files": len(no_wheels), "flagged": sum(r["no_wheels_flagged"] for r in no_wheels),
                          "others": len(with_wheels), "others_flagged": sum(r["no_wheels_flagged"] for r in with_wheels)},
        "missing_wheels": {"lines": sum(r.get("no_wheel", 0) for r in rows),
                           "files": sum(bool(r.get("no_wheel")) for r in rows)},
    }


def _pct(num, den) -> str:
    return f"{100 * num / den:.1f}%" if den else "n/a"


def _frac(share) -> str:
    return "n/a" if share is None else f"{100 * share:.1f}%"


def render(s: dict, markdown: bool) -> str:
    out = []
    sep = " | "

    def table(head, rows):
        if markdown:
            out.append("| " + sep.join(head) + " |")
            out.append("|" + "|".join("---" for _ in head) + "|")
            out.extend("| " + sep.join(map(str, r)) + " |" for r in rows)
        else:
            widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
            for r in [head] + rows:
                out.append("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
        out.append("")

    k = s["kinds"]
    tot = {f: sum(v[f] for v in k.values()) for f in ("files", "parsed", "checked", "right", "crashed")}
    table(["kind", "files", "read without error", "fields checked", "fields right", "share right", "runs with a crashed check"],
          [[name, v["files"], v["parsed"], v["checked"], v["right"], _pct(v["right"], v["checked"]), v["crashed"]]
           for name, v in k.items()] + [["all", tot["files"], tot["parsed"], tot["checked"], tot["right"],
                                          _pct(tot["right"], tot["checked"]), tot["crashed"]]])
    v = s["verdicts"]
    table(["verdict class", "reports", "doctor says", "right", "precision", "recall"],
          [[c if c not in TARGET else f"{c} (right: {TARGET[c]})", d["expected"], d["predicted"] if c not in TARGET else "",
            d["right"], _frac(d["precision"]), _frac(d["recall"])]
           for c, d in v["per_class"].items()] + [["all", v["reports"], v["reports"], v["right"], "", _pct(v["right"], v["reports"])]])
    table(["setting", "reports", "doctor notices", "right"],
          [[n, d["expected"], d["predicted"], d["right"]] for n, d in s["settings"].items()])
    sk, ov, cn = s["smi_knowledge"], s["os_verdicts"], s["cpu_no_wheels"]
    table(["other measure", "value"], [
        ["nvidia-smi GPUs whose compute capability checks/ gives (by name, else PCI id)", f"{sk['right']} of {sk['checked']}"],
        ["os-release trees given exactly the expected os findings", f"{ov['right']} of {ov['trees']}"],
        ["cpuinfo of architectures without PyTorch wheels that the doctor flags", f"{cn['flagged']} of {cn['files']}"],
        ["cpuinfo of architectures with wheels that the doctor flags (wrongly)", f"{cn['others_flagged']} of {cn['others']}"],
        ["pip lines naming a wheel that does not exist for the machine (files)",
         f"{s['missing_wheels']['lines']} ({s['missing_wheels']['files']})"],
    ])
    return "\n".join(out)


def details(rows: list) -> str:
    out = []
    for r in rows:
        lines = []
        if not r["parsed"]:
            lines.append(f"  not read: {r.get('error')}")
        for path, got, want in (r.get("fields") or {}).get("wrong", []):
            lines.append(f"  field {path}: got {got!r}, want {want!r}")
        for i, got, want in (r.get("knowledge") or {}).get("wrong", []):
            lines.append(f"  knowledge GPU {i}: compute capability {got!r}, want {want!r}")
        if r["kind"] == "collect_env" and r["parsed"] and r["predicted"] != target(r):
            lines.append(f"  verdict: doctor says {r['predicted']} ({', '.join(r['ids'])}), "
                         f"want {r['expected']['verdict']['class']} ({', '.join(r['expected']['verdict']['ids'])})")
        if r["kind"] == "os-release" and not r["verdict_right"]:
            lines.append(f"  os findings: {r['ids']}, want {r['expected']['verdict']['ids']}")
        for msg in r.get("crashed") or []:
            lines.append(f"  crashed: {msg}")
        if lines:
            out.append(r["file"])
            out.extend(lines)
    return "\n".join(out)


def run(corpus: Path = None) -> tuple:
    """Score the corpus, or another folder laid out like it (collect_env/, nvidia-smi-xml/,
    os-release/, cpuinfo/): a held-out set scored by the same code (docs/corpus.md)."""
    if corpus is None:
        rows = score_reports() + score_smi() + score_os() + score_cpuinfo()
    else:
        rows = score_reports((corpus / "collect_env",)) + score_smi(corpus) + score_os(corpus) + score_cpuinfo(corpus)
    return rows, summarise(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown (benchmarks/results/corpus.md)")
    ap.add_argument("--details", action="store_true", help="also list every wrong field and verdict, per file")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--corpus", type=Path, help="score this folder (laid out like tests/corpus) instead")
    args = ap.parse_args(argv)
    rows, summary = run(args.corpus)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(render(summary, args.markdown))
    if args.details:
        print(details(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
