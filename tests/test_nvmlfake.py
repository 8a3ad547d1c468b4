"""The NVML fake has the real binding's face, and real GPU states round-trip through it."""

import inspect
import json
from pathlib import Path

import pytest
from smi_fake import TO_NVML, from_smi_xml

from debtorch import nvmlfake
from debtorch.facts import nvidia

pynvml = pytest.importorskip("pynvml")   # nvidia-ml-py: in the test extras
REAL = Path(__file__).resolve().parent / "real"
HOSTS = Path(__file__).resolve().parent / "hosts"


@pytest.mark.parametrize("name", sorted(nvmlfake.SPEC))
def test_every_fake_function_exists_in_pynvml_with_the_same_parameters(name):
    real = getattr(pynvml, name, None)
    assert real is not None, f"pynvml has no {name}"
    fake = getattr(nvmlfake.FakeNVML({"devices": []}), name)
    assert list(inspect.signature(fake).parameters) == list(inspect.signature(real).parameters)


def test_library_calls_have_pynvml_signatures():
    fake = nvmlfake.FakeNVML({})
    for name in ("nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlDeviceGetHandleByIndex",
                 "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId", "nvmlErrorString"):
        assert list(inspect.signature(getattr(fake, name)).parameters) == \
            list(inspect.signature(getattr(pynvml, name)).parameters), name


def test_constants_and_error_classes_match_pynvml():
    for k, v in nvmlfake.CONSTANTS.items():
        assert getattr(pynvml, k) == v, k
    for k, cls in nvmlfake.ERROR_CLASSES.items():
        assert cls().value == getattr(pynvml, k)().value, k
    # The hierarchy behaves like pynvml's: NVMLError(value) is the subclass for that value.
    e = nvmlfake.NVMLError(nvmlfake.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(e, nvmlfake.ERROR_CLASSES["NVMLError_NotSupported"]) and isinstance(e, nvmlfake.NVMLError)
    r = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert type(e).__name__ == type(r).__name__ and str(e) == str(r)
    m = nvmlfake.NVMLError(nvmlfake.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    assert str(m) == str(pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))


def test_struct_attributes_are_pynvml_field_names():
    for fake_name, real_name in (("nvmlPciInfo_t", "nvmlPciInfo_t"), ("c_nvmlMemory_t", "c_nvmlMemory_t"),
                                 ("c_nvmlUtilization_t", "c_nvmlUtilization_t"),
                                 ("c_nvmlProcessInfo_t", "c_nvmlProcessInfo_t")):
        real_fields = [f[0] for f in getattr(pynvml, real_name)._fields_]
        assert set(nvmlfake.STRUCT_FIELDS[fake_name]) <= set(real_fields), fake_name


def test_answers_have_pynvml_shapes():
    fake = nvmlfake.load(HOSTS / "debian13-workstation-rtx3080" / "_nvml.json")
    with pytest.raises(nvmlfake.NVMLError) as exc:
        fake.nvmlDeviceGetCount()          # like the real library: nothing before nvmlInit
    assert exc.value.value == nvmlfake.NVML_ERROR_UNINITIALIZED
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetCudaComputeCapability(h) == (8, 6)       # a tuple, as pynvml returns
    assert isinstance(fake.nvmlDeviceGetName(h), str)
    mem = fake.nvmlDeviceGetMemoryInfo(h)
    assert mem.total == 10240 * 2 ** 20 and mem.used == 9184 * 2 ** 20   # the XML's MiB, in bytes
    assert type(fake.nvmlDeviceGetPciInfo(h)).__name__ == "nvmlPciInfo_t"
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetEccMode(h)                                    # consumer GPU
    with pytest.raises(TypeError):
        fake.nvmlDeviceGetTemperature(h)                                # sensor is required, as in pynvml
    assert fake.nvmlDeviceGetHandleByUUID(fake.nvmlDeviceGetUUID(h)).index == 0


def test_an_unrecorded_call_says_so():
    fake = nvmlfake.FakeNVML({"system": {}, "devices": [{}]})
    fake.nvmlInit()
    with pytest.raises(nvmlfake.NVMLError) as exc:
        fake.nvmlSystemGetDriverVersion()
    assert "not recorded" in str(exc.value)


def test_init_error_is_raised_like_the_library():
    fake = nvmlfake.load(HOSTS / "debian12-driver-mismatch-rtx3090" / "_nvml.json")
    with pytest.raises(nvmlfake.NVMLError) as exc:
        fake.nvmlInit()
    assert exc.value.value == nvmlfake.NVML_ERROR_LIB_RM_VERSION_MISMATCH


# What only nvidia-smi's XML gives debtorch (the GPU fields without an NVML call: the driver model,
# the virtualization mode and vGPU licence, the MIG device list; NVML has calls for some that debtorch
# does not make).
XML_ONLY = {f.name for f in nvidia.GPU_FIELDS if f.nvml is None}


@pytest.mark.parametrize("xml", ["rtx-3080-595.58.03.xml", "rtx-3090-525.147.05.xml", "a100-sxm4-80gb-535.54.03.xml",
                                 "tesla-t4-515.105.01.xml", "gtx-1070-ti-excerpt-no-driver-version.xml"])
def test_real_xml_through_the_fake_gives_what_nvidia_smi_gives(xml):
    """XML -> fake -> the NVML path agrees with XML -> the nvidia-smi path, field by field."""
    text = (REAL / "nvidia-smi-xml" / xml).read_text()
    fake = nvmlfake.loads(from_smi_xml(text))
    fake.nvmlInit()
    via_nvml = nvidia.nvml_facts(fake)["gpus"]
    via_smi = nvidia.parse_smi_xml(text)["gpus"]
    assert len(via_nvml) == len(via_smi) == 1
    a, b = via_nvml[0], via_smi[0]
    for field, value in b.items():
        if field in ("unknown", "compute_capability") or field in XML_ONLY:
            continue
        assert a.get(field) == value, field
        if value is None and b["unknown"][field] == nvidia.NOT_SUPPORTED:
            assert a["unknown"][field] == nvidia.NOT_SUPPORTED, field


def test_every_gpu_field_nvml_answers_can_be_faked():
    """tests/smi_fake.py writes each fact back as the NVML answer GPU_FIELDS reads it from: a field with a
    new converter needs its inverse there."""
    missing = [f.name for f in nvidia.GPU_FIELDS if f.nvml is not None and f.from_nvml not in TO_NVML]
    assert not missing


def test_dump_records_a_binding_that_replays_the_same():
    fake = nvmlfake.load(HOSTS / "debian12-server-8xa100-nvlink" / "_nvml.json")
    fake.nvmlInit()
    before = nvidia.nvml_facts(fake)
    data = nvmlfake.dump(fake, source="test")
    json.dumps(data)                     # JSON-ready
    again = nvmlfake.loads(data)
    again.nvmlInit()
    assert nvidia.nvml_facts(again) == before
