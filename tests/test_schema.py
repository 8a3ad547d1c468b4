"""The one schema helper (debtorch/schema.py): its wording, the line of a key, and that no
document, however odd, gives anything but a value or one line."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import schema
from debtorch.facts import nvidia
from debtorch.facts import schema as facts_schema

SPEC = {
    "count": schema.integer(0, 10),
    "name": schema.text(max_len=5, one_line=True),
    "mode": schema.one_of("a", "b"),
    "ratio": schema.number("a number between 0 and 1", lambda v: 0 < v < 1),
    "flags": schema.List(schema.BOOL, min_len=1, max_len=2, expect="an array of booleans"),
    "rows": [schema.Table({"id": schema.text(), "size": schema.integer()}, required=("id",))],
    "env": schema.Table({"*": schema.text()}, keys=("a NAME", str.isupper)),
}


class Bad(Exception):
    pass


@pytest.mark.parametrize("value,said", [
    ({"count": 11}, "count: must be an integer from 0 to 10 (got 11)"),
    ({"count": True}, "count: must be an integer from 0 to 10 (got true)"),
    ({"name": "toolong"}, 'name: must be at most 5 characters (got "toolong")'),
    ({"name": "a\nb"}, 'name: must be one line (got "a\\nb")'),
    ({"mode": "c"}, 'mode: must be one of a, b (got "c")'),
    ({"ratio": float("nan")}, "ratio: must be a number between 0 and 1 (got nan)"),
    ({"ratio": 1}, "ratio: must be a number between 0 and 1 (got 1)"),
    ({"flags": "yes"}, 'flags: must be an array of booleans (got "yes")'),
    ({"flags": []}, "flags: must have 1 to 2 items (got 0)"),
    ({"flags": [True, 1]}, "flags[1]: must be true or false (got 1)"),
    ({"rows": [{"id": "x"}, {"size": 1}]}, "rows[1].id: missing"),
    ({"rows": [{"id": "x", "colour": 1}]}, "rows[0].colour: unknown key (known: id, size)"),
    ({"rows": [3]}, "rows[0]: must be a table (got 3)"),
    ({"env": {"lower": "x"}}, "env.lower: not a NAME"),
    ({"extra": 1}, "extra: unknown key (known: count, name, mode, ratio, flags, rows, env)"),
])
def test_one_wording_with_the_path_of_the_key(value, said):
    with pytest.raises(schema.Invalid) as exc:
        schema.check(value, SPEC)
    assert str(exc.value) == said


def test_an_open_document_allows_unknowns_and_newer_fields():
    schema.check({"count": None, "rows": [{"id": "x", "newer": [1]}], "newer": {}}, SPEC, open=True)
    with pytest.raises(schema.Invalid, match=r"^rows\[0\]\.size: must be an integer \(got \"1\"\)$"):
        schema.check({"rows": [{"id": "x", "size": "1"}]}, SPEC, open=True)


def test_a_shown_value_is_one_short_printable_line():
    assert schema.show("evil\x1b[2J\u202e" + "x" * 100) == '"evil\\u001b[2J\\u202e' + "x" * 37 + "..."
    assert schema.show({"a": 1}) == "a table" and schema.show([1]) == "an array" and schema.show(2.0) == "2.0"


TOML = '''# a comment
top = 1
[table]  # with a comment
key = "x"
"quoted.key" = 2
dotted.inner = 3
inline = { a = 1 }
text = """
[not]
a = 1
"""

[[row]]
id = "first"

[[row]]
id = "second"
size = 4
'''


def test_key_lines_number_the_rows_of_an_array_of_tables():
    lines = schema.key_lines(TOML)
    assert lines["top"] == 2 and lines["table"] == 3 and lines["table.key"] == 4
    assert lines["table.quoted.key"] == 5 and lines["table.dotted.inner"] == 6 and lines["table.text"] == 8
    assert "not" not in lines and "a" not in lines          # inside a multi-line string
    assert lines["row"] == lines["row[0]"] == 13 and lines["row[1]"] == 16 and lines["row[1].size"] == 18
    assert schema.line_of(lines, "table.inline.a") == 7      # inside an inline table: the table's line
    assert schema.line_of(lines, "row[1].missing") == 16     # a missing key: its row's header
    assert schema.line_of(lines, "nowhere") == 1


def test_load_toml_places_the_problem_in_its_file():
    with pytest.raises(Bad, match=r"^f.toml:18: row\[1\]\.size: must be a string \(got 4\)$"):
        schema.load_toml(TOML, "f.toml", {"*": schema.ANY, "row": [{"id": schema.text(), "size": schema.text()}]}, Bad)
    with pytest.raises(Bad, match=r"^f.toml:2: not valid TOML: "):
        schema.load_toml("a = 1\nb = = 2\n", "f.toml", {}, Bad)
    with pytest.raises(Bad, match=r"^f.toml:1: not valid TOML \(nested too deeply\)$"):
        schema.load_toml("a = " + "[" * 100_000, "f.toml", {}, Bad)


def test_every_gpu_field_has_its_type_in_the_facts_schema():
    """A new GPU field is one row of nvidia.GPU_FIELDS plus its type for documents that come in."""
    assert {f.name for f in nvidia.GPU_FIELDS} | {"index", "unknown"} == set(facts_schema.GPU)


LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=12))
VALUES = st.recursive(LEAF, lambda kids: st.lists(kids, max_size=3)
                      | st.dictionaries(st.sampled_from(["count", "name", "rows", "id", "env", "X", "x"]), kids,
                                        max_size=3), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(VALUES, st.booleans())
def test_any_value_is_accepted_or_one_line(value, open_):
    try:
        schema.check(value, SPEC, open=open_)
    except schema.Invalid as exc:
        assert "\n" not in str(exc) and str(exc).startswith(exc.path)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_key_lines_and_a_value_or_one_line(text):
    lines = schema.key_lines(text)
    assert all(1 <= n <= len(text.splitlines()) for n in lines.values())
    try:
        schema.load_toml(text, "p.toml", {"*": schema.ANY}, Bad)
    except Bad as exc:
        assert "\n" not in str(exc) and str(exc).startswith("p.toml:")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([
    "[[gpu]]", "[[chip]]", "[gpu]", 'name = "NVIDIA A100"', 'cc = "8.0"', "cc = 8.0", 'cc = "x"', 'arch = "Ampere"',
    'segment = "dc"', 'match = ["a100"]', "match = []", 'source = "https://x"', 'confidence = "unconfirmed"',
    'note = "n"', "colour = 1", 'silence = ["cpu.W001"]', "[minimums]", 'driver = "5.5"', "shm = 'lots'", "x = [",
]), max_size=12))
def test_any_data_file_or_site_config_gives_a_value_or_one_line(lines):
    """The knowledge loader's and the site config's specs, on arbitrary files made of their own lines."""
    from debtorch import knowledge
    from debtorch.doctor import siteconfig

    text = "\n".join(lines)
    for read, error in ((lambda: schema.load_toml(text, "f.toml", knowledge.SCHEMA["gpus.toml"], knowledge.KnowledgeError),
                         knowledge.KnowledgeError), (lambda: siteconfig.parse(text, "f.toml"), siteconfig.SiteConfigError)):
        try:
            read()
        except error as exc:
            assert "\n" not in str(exc) and str(exc).startswith("f.toml:"), str(exc)
