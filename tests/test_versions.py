"""Version arithmetic (debtorch/versions.py): every spelling people and tools use, and
arbitrary input never raises."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import versions


@pytest.mark.parametrize("value,expected", [
    ("8.0", (8, 0)), ("8.6", (8, 6)), (8.9, (8, 9)), ([7, 5], (7, 5)), ({"major": 9, "minor": 0}, (9, 0)),
    ("sm_86", (8, 6)), ("sm_120", (12, 0)), ("sm_90a", (9, 0)), ("compute_37", (3, 7)), ("86", (8, 6)),
    ("12.0", (12, 0)), (None, None), ("", None), ("eight", None), (True, None), ([8], None), ("8.10", None),
    (float("nan"), None),
])
def test_compute_capability_spellings(value, expected):
    assert versions.parse_cc(value) == expected


def test_cuda_and_cudnn_integers():
    assert versions.cuda_from_int(12020) == "12.2"          # nvmlSystemGetCudaDriverVersion
    assert versions.cuda_from_int("11040") == "11.4"        # torch: "found version 11040" (pytorch#112553)
    assert versions.cuda_from_int(0) is None and versions.cuda_from_int("x") is None
    assert versions.cudnn_from_int(8906) == "8.9.6" and versions.cudnn_from_int(90100) == "9.1.0"


@pytest.mark.parametrize("path,version", [
    ("/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.5", "8.9.5"), ("libcudart.so.12", "12"),
    ("libcudnn.8.dylib", "8"), ("C:\\cuda\\bin\\cudnn64_7.dll", "7"), ("libcudart_static.a", None),
])
def test_versions_in_library_names(path, version):
    assert versions.library_version(path) == version


@pytest.mark.parametrize("version,cuda,hip,variant", [
    ("2.5.1+cu124", "12.4", None, "cu124"), ("2.5.1", "12.4", None, "cu124"), ("2.13.0+cpu", None, None, "cpu"),
    ("2.13.0", None, None, "cpu"), ("2.4.0+rocm6.1", None, "6.1.4", "rocm6.1"), (None, None, None, None),
])
def test_wheel_variant(version, cuda, hip, variant):
    assert versions.variant_of(version, cuda, hip) == variant


def test_torch_versions_and_comparisons():
    assert versions.torch_version("2.5.1+cu124") == {"series": "2.5", "version": "2.5.1", "local": "cu124"}
    assert versions.torch_series_tuple("2.10.0") == (2, 10)
    assert versions.below("2.1.2+cu121", "2.4") and not versions.below("2.4.0", "2.4") and not versions.below("x", "1")
    assert versions.major_minor("12.6.3") == (12, 6) and versions.cuda_tag("12.6") == "cu126"


def test_digits_of_other_scripts_are_not_version_numbers():
    # "\\d" matches a Mongolian or Arabic-Indic digit, which PEP 440 (packaging's Version) refuses:
    # found by the property below on Debian 12's hypothesis, as an InvalidVersion out of min_driver.
    for text in ("\u1810", "\u0661\u0662.\u0664", "12.\u0664", "\u17e1\u17e2"):
        assert versions.numeric(text) is None and versions.loose(text) is None
        assert versions.first_dotted(text) is None and versions.torch_version(text) is None
    assert str(versions.numeric("12.4")) == "12.4" and str(versions.loose("a 12.4 b")) == "12.4"


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=30), st.integers(), st.floats(), st.booleans(),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)))
def test_arbitrary_input_never_raises(value):
    for fn in (versions.parse_cc, versions.cc_text, versions.sm_name, versions.cuda_from_int, versions.cudnn_from_int,
               versions.numeric, versions.loose, versions.first_dotted, versions.major_minor, versions.library_version,
               versions.torch_version, versions.series, versions.torch_series_tuple, versions.cuda_tag):
        fn(value)
    versions.variant_of(value, value, value)
    versions.below(value, value)
