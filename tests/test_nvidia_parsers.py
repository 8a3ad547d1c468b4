"""The NVIDIA and CUDA parsers: real captured text, and arbitrary text never raises."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import versions
from debtorch.facts import cuda, nvidia

REAL = Path(__file__).resolve().parent / "real"


def real(path: str) -> str:
    return (REAL / path).read_text()


# ---------------------------------------------------------------- /proc/driver/nvidia/version

def test_proprietary_module_version_file():
    v = nvidia.parse_proc_version(real("nvidia-proc/proprietary-x86_64-525.105.17-version"))
    assert v["version"] == "525.105.17"
    assert v["flavor"] == "proprietary"
    assert v["gcc"].startswith("gcc version 11.3.0")


def test_open_module_version_file():
    v = nvidia.parse_proc_version(real("nvidia-proc/open-x86_64-515.43.04-version"))
    assert (v["version"], v["flavor"]) == ("515.43.04", "open")


def test_text_without_nvrm_line_is_no_module():
    assert nvidia.parse_proc_version("GCC version:  gcc version 12\n") is None


# ---------------------------------------------------------------- /proc/modules

def test_proc_modules_real_sample():
    mods = nvidia.parse_proc_modules(real("nvidia-proc/modules-lutris-sample"))
    assert mods["nvidia"]["used_by"] == ["nvidia_uvm", "nvidia_modeset"]
    assert mods["nvidia"]["refcount"] == 3776
    assert mods["nvidia_drm"]["taint"] == "POE"
    assert mods["video"]["taint"] == ""
    assert "nouveau" not in mods


# ---------------------------------------------------------------- modprobe.d and the command line

def test_debian_blacklist_file_blacklists_nouveau():
    found = nvidia.parse_modprobe_conf(real("debian-nvidia-kernel-support-535.261.03/nvidia-blacklists-nouveau.conf"),
                                       "/etc/modprobe.d/nvidia-blacklists-nouveau.conf")
    assert found == [{"module": "nouveau", "how": "blacklist", "file": "/etc/modprobe.d/nvidia-blacklists-nouveau.conf",
                      "line": "blacklist nouveau"}]


def test_debian_modprobe_install_lines_are_not_blacklisting():
    # "install nvidia modprobe -i nvidia-current ..." loads the renamed module; it keeps nothing out.
    assert nvidia.parse_modprobe_conf(real("debian-nvidia-kernel-support-535.261.03/nvidia-modprobe.conf")) == []
    assert nvidia.parse_modprobe_conf(real("debian-nvidia-kernel-support-535.261.03/nvidia-options.conf")) == []


@pytest.mark.parametrize("line,how", [
    ("options nouveau modeset=0", "options modeset=0"),
    ("install nouveau /bin/false", "install /bin/false"),
    ("install nova-core /bin/true", "install /bin/true"),
    ("alias nouveau off", "alias off"),
    ("blacklist nova_core  # Linux 6.15+", "blacklist"),
])
def test_other_ways_to_keep_a_module_out(line, how):
    [found] = nvidia.parse_modprobe_conf(line + "\n", "x.conf")
    assert found["how"] == how
    assert found["module"] in ("nouveau", "nova_core")


def test_commented_and_unrelated_lines_are_ignored():
    text = "# blacklist nouveau\nblacklist pcspkr\noptions nvidia-current-drm modeset=1\n"
    assert nvidia.parse_modprobe_conf(text) == []


def test_cmdline_blacklists_and_keeps_only_relevant_parameters():
    cl = nvidia.parse_cmdline("BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet modprobe.blacklist=nouveau,pcspkr "
                              "nouveau.modeset=0 intel_iommu=on iommu=pt nvidia-drm.modeset=1 -- init-arg=1\n")
    assert [(b["module"], b["how"]) for b in cl["blacklist"]] == [("nouveau", "modprobe.blacklist"),
                                                                   ("nouveau", "modeset=0")]
    assert cl["params"] == {"modprobe.blacklist": "nouveau,pcspkr", "nouveau.modeset": "0", "intel_iommu": "on",
                            "iommu": "pt", "nvidia-drm.modeset": "1"}


def test_a_recorded_cmdline_keeps_only_what_is_reported():
    text = "BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet intel_iommu=on nouveau.modeset=0 -- --secret-init-arg\n"
    trimmed = nvidia.trim_cmdline(text)
    assert trimmed == "intel_iommu=on nouveau.modeset=0\n"
    assert nvidia.parse_cmdline(trimmed) == nvidia.parse_cmdline(text)


def test_cmdline_rd_driver_blacklist_for_nova_core():
    cl = nvidia.parse_cmdline("ro rd.driver.blacklist=nova_core,nouveau")
    assert {b["module"] for b in cl["blacklist"]} == {"nova_core", "nouveau"}


# ---------------------------------------------------------------- efivars

def test_secure_boot_efivar_bytes():
    # No captured efivar file was found in public fixtures; the layout is the kernel's
    # (Documentation/filesystems/efivarfs.rst): 4 attribute bytes, then the data.
    assert nvidia.parse_efivar_bool(b"\x06\x00\x00\x00\x01") is True
    assert nvidia.parse_efivar_bool(b"\x06\x00\x00\x00\x00") is False
    # read_text decodes these bytes; the parser takes the text too.
    assert nvidia.parse_efivar_bool("\x06\x00\x00\x00\x01") is True
    assert nvidia.parse_efivar_bool(b"\x06\x00\x00") is None
    assert nvidia.parse_efivar_bool(b"\x06\x00\x00\x00\x07") is None


def test_mokutil_answers():
    assert nvidia.parse_mokutil_test_key("/var/lib/dkms/mok.pub is already enrolled\n") is True
    assert nvidia.parse_mokutil_test_key("/var/lib/dkms/mok.pub is not enrolled\n") is False
    assert nvidia.parse_mokutil_test_key("EFI variables are not supported on this system\n") is None


# ---------------------------------------------------------------- nvidia-smi -q -x

@pytest.mark.parametrize("name,driver,cuda,gpu", [
    ("rtx-3080-595.58.03.xml", "595.58.03", "13.2", "NVIDIA GeForce RTX 3080"),
    ("rtx-3090-525.147.05.xml", "525.147.05", "12.0", "NVIDIA GeForce RTX 3090"),
    ("a100-sxm4-80gb-535.54.03.xml", "535.54.03", "12.2", "NVIDIA A100-SXM4-80GB"),
    ("tesla-t4-515.105.01.xml", "515.105.01", "11.7", "Tesla T4"),
    ("gtx-1070-ti-excerpt-no-driver-version.xml", None, None, "GeForce GTX 1070 Ti"),
])
def test_smi_xml_versions_v10_to_v13(name, driver, cuda, gpu):
    d = nvidia.parse_smi_xml(real(f"nvidia-smi-xml/{name}"))
    assert (d["driver_version"], d["cuda_driver_version"]) == (driver, cuda)
    assert [g["name"] for g in d["gpus"]] == [gpu]


def test_smi_xml_consumer_gpu_says_not_supported_for_ecc():
    [g] = nvidia.parse_smi_xml(real("nvidia-smi-xml/rtx-3080-595.58.03.xml"))["gpus"]
    assert g["ecc_mode_current"] is None and g["unknown"]["ecc_mode_current"] == nvidia.NOT_SUPPORTED
    assert g["memory_total"] == 10240 * 2 ** 20 and g["memory_used"] == 9184 * 2 ** 20
    assert (g["pcie_current_gen"], g["pcie_max_gen"], g["pcie_current_width"]) == (4, 4, 16)
    assert g["power_draw_w"] == 139.62 and g["power_limit_w"] == 320.0      # v13 gpu_power_readings
    assert g["throttle_reasons"] == []                                       # v13 clocks_event_reasons


def test_smi_xml_idle_gpu_shows_idle_reason_and_downshifted_link():
    [g] = nvidia.parse_smi_xml(real("nvidia-smi-xml/rtx-3090-525.147.05.xml"))["gpus"]
    assert g["throttle_reasons"] == ["gpu_idle"]                             # v12 clocks_throttle_reasons
    assert (g["pcie_current_gen"], g["pcie_max_gen"]) == (1, 4)
    assert g["persistence_mode"] is True
    assert g["power_limit_w"] == 200.0                                       # enforced, below the 350 W default


def test_smi_xml_datacenter_gpu_ecc_mig_and_processes():
    [a100] = nvidia.parse_smi_xml(real("nvidia-smi-xml/a100-sxm4-80gb-535.54.03.xml"))["gpus"]
    assert a100["ecc_mode_current"] is True and a100["ecc_uncorrected_volatile"] == 0
    assert a100["mig_mode_current"] is True
    assert a100["remapped_rows_pending"] is None and a100["unknown"]["remapped_rows_pending"] == nvidia.NOT_SUPPORTED
    [t4] = nvidia.parse_smi_xml(real("nvidia-smi-xml/tesla-t4-515.105.01.xml"))["gpus"]
    # Xorg (type G) holds memory but no CUDA context: only the python process counts.
    assert t4["processes"] == [{"pid": 5762, "used_memory": 1005 * 2 ** 20}]
    assert t4["retired_pages_pending"] is False and t4["retired_pages_double_bit"] == 0
    assert (t4["pcie_current_width"], t4["pcie_max_width"]) == (8, 16)
    assert t4["pci_address"] == "0000:00:1e.0"


def test_an_unknown_word_for_a_switch_is_an_unrecognised_value_not_a_crash():
    xml = ('<nvidia_smi_log><gpu id="00000000:01:00.0"><persistence_mode>Maybe</persistence_mode>'
           '<ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode></gpu></nvidia_smi_log>')
    gpu = nvidia.parse_smi_xml(xml)["gpus"][0]
    assert gpu["persistence_mode"] is None and gpu["unknown"]["persistence_mode"] == "unrecognised value 'Maybe'"
    assert gpu["ecc_mode_current"] is True and gpu["pci_address"] == "0000:01:00.0"


def test_not_xml_is_an_error_value():
    assert nvidia.parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")[
        "error"].startswith("not nvidia-smi XML")


# ---------------------------------------------------------------- nvidia-smi topo -m, --query-gpu

def test_topo_matrix_nvlink_eight_gpus():
    m = nvidia.parse_topo_matrix(real("nvidia-smi-topo/a100-x8-nv12-gpu-rows"))
    assert m["gpus"] == 8 and len(m["cells"]) == 28
    assert set(m["cells"].values()) == {"NV12"}
    assert nvidia.topo_link("NV12") == {"link": "nvlink", "nvlink_count": 12, "pcie_level": None}


def test_topo_matrix_pcie_only():
    two = nvidia.parse_topo_matrix(real("nvidia-smi-topo/gtx1080ti-x2-phb"))
    assert two["cells"] == {"0,1": "PHB"} and two["cpu_affinity"] == {0: "0-11", 1: "0-11"}
    four = nvidia.parse_topo_matrix(real("nvidia-smi-topo/a10-x4-sys"))
    assert four["gpus"] == 4 and set(four["cells"].values()) == {"SYS"}   # NIC rows and columns ignored
    assert nvidia.topo_link("SYS")["pcie_level"] == "system"


def test_topo_matrix_tab_separated_as_nvidia_smi_prints_it():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tPIX\t0-31\t0\t\tN/A\nGPU1\tPIX\t X \t0-31\t0\t\tN/A\n")
    m = nvidia.parse_topo_matrix(text)
    assert m["cells"] == {"0,1": "PIX"} and m["numa_affinity"] == {0: "0", 1: "0"}


def test_compute_cap_query():
    assert nvidia.parse_compute_cap_csv("00000000:00:1E.0, 7.5\n00000000:01:00.0, 8.0\n") == {
        "0000:00:1e.0": "7.5", "0000:01:00.0": "8.0"}
    assert nvidia.parse_compute_cap_csv('Field "compute_cap" is not a valid field to query.\n') == {}


# ---------------------------------------------------------------- small decoders

def test_throttle_reason_bits():
    assert nvidia.decode_throttle_reasons(0x1) == ["gpu_idle"]
    assert nvidia.decode_throttle_reasons(0x4 | 0x40 | 0x80) == ["sw_power_cap", "hw_thermal_slowdown", "hw_power_brake"]
    assert nvidia.decode_throttle_reasons(0x1000) == ["other_0x1000"]


def test_cuda_version_integer():
    assert versions.cuda_from_int(12020) == "12.2"
    assert versions.cuda_from_int(13020) == "13.2"
    assert versions.cuda_from_int(11040) == "11.4"   # "found version 11040" (pytorch#112553)


def test_bus_ids_compare_across_nvml_and_sysfs():
    assert nvidia.normalise_bus_id("00000000:0C:00.0") == nvidia.normalise_bus_id("0000:0c:00.0") == "0000:0c:00.0"


@pytest.mark.parametrize("text,kind", [
    ("NVML did not initialise: RM has detected an NVML/RM version mismatch.", "driver_library_mismatch"),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver_library_mismatch"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "driver_not_loaded"),
    ("NVML did not initialise: Driver Not Loaded", "driver_not_loaded"),
    ("NVML did not initialise: NVML Shared Library Not Found", "library_not_found"),
    ("NVML binding not installed (nvidia-ml-py / python3-pynvml)", "binding_not_installed"),
    ("command not found", "command_not_found"),
    ("timed out after 15 s", "timed_out"),
])
def test_failure_messages_are_classified(text, kind):
    assert nvidia.classify_failure(text) == kind


def test_pci_ids_nvidia_block():
    text = "# comment\n10de  NVIDIA Corporation\n\t1b82  GP104 [GeForce GTX 1070 Ti]\n\t\t1043 861e  ROG\n" \
           "10df  Emulex Corporation\n\t1ae5  LP6000\n"
    assert nvidia.parse_pci_ids_nvidia(text) == {"0x1b82": "GP104 [GeForce GTX 1070 Ti]"}
    assert "Emulex" not in nvidia.trim_pci_ids(text)


# ---------------------------------------------------------------- ldconfig -p and library names

def test_ldconfig_real_cache_of_this_kind_of_machine():
    entries = cuda.parse_ldconfig(real("ldconfig/debian12-vm-ldconfig-p"))
    first_line = real("ldconfig/debian12-vm-ldconfig-p").splitlines()[0]
    assert len(entries) == int(first_line.split()[0])          # "536 libs found in cache"
    cudart = [e for e in entries if e["name"] == "libcudart.so.13"]
    assert cudart and cudart[0]["path"].endswith("/libcudart.so.13")
    assert all(e["path"].startswith("/") for e in entries)


def test_ldconfig_hwcap_flags_are_kept():
    [e] = cuda.parse_ldconfig("\tlibfoo.so.1 (libc6,x86-64, hwcap: 0x0000000000000002) => /usr/lib/libfoo.so.1\n")
    assert e == {"name": "libfoo.so.1", "flags": "libc6,x86-64, hwcap: 0x0000000000000002",
                 "path": "/usr/lib/libfoo.so.1"}


@pytest.mark.parametrize("name,family,version", [
    ("libcudnn_ops_infer.so.8", "cudnn", "8"),
    ("libcudnn.so.9.1.0", "cudnn", "9.1.0"),
    ("libcuda.so.535.54.03", "cuda", "535.54.03"),
    ("libnvidia-ml.so.1", "nvidia-ml", "1"),
    ("libcublasLt.so.12", "cublasLt", "12"),
    ("libcudadebugger.so.1", None, "1"),
    ("libcudart_static.a", None, None),
])
def test_library_family_and_version(name, family, version):
    assert cuda.lib_family(name) == family
    assert versions.library_version(name) == version


def test_nvcc_version():
    out = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
           "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
           "Build cuda_13.0.r13.0/compiler.36424714_0\n")   # recorded on the Debian 12 development VM
    assert cuda.parse_nvcc_version(out) == {"release": "13.0", "version": "13.0.88"}


# ---------------------------------------------------------------- arbitrary input never raises

TEXT = st.text(max_size=400)
REALISH = st.sampled_from([
    real("nvidia-proc/proprietary-x86_64-525.105.17-version"), real("nvidia-proc/modules-lutris-sample"),
    real("nvidia-smi-topo/a10-x4-sys"), real("nvidia-smi-xml/gtx-1070-ti-excerpt-no-driver-version.xml"),
    real("debian-nvidia-kernel-support-535.261.03/nvidia-modprobe.conf"),
])


def mangled():
    """Real text cut and spliced with noise: near-valid input that finds edge cases."""
    return st.builds(lambda t, cut, noise: t[:cut] + noise + t[cut:], REALISH, st.integers(0, 3000), TEXT)


PARSERS = [
    nvidia.parse_proc_version, nvidia.parse_proc_modules, nvidia.parse_modprobe_conf, nvidia.parse_cmdline,
    nvidia.parse_efivar_bool, nvidia.parse_mokutil_test_key, nvidia.parse_smi_xml, nvidia.parse_topo_matrix,
    nvidia.parse_compute_cap_csv, nvidia.normalise_bus_id, nvidia.trim_cmdline, nvidia.classify_failure, nvidia.parse_pci_ids_nvidia,
    nvidia.trim_pci_ids, nvidia.topo_link, versions.cuda_from_int, nvidia.decode_throttle_reasons,
    cuda.parse_ldconfig, cuda.lib_family, versions.library_version, cuda.parse_nvcc_version,
]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None)
@given(text=st.one_of(TEXT, mangled()))
def test_parsers_never_raise(parser, text):
    parser(text)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=16), mask=st.one_of(st.integers(), st.none(), st.floats(allow_nan=True)))
def test_binary_and_number_decoders_never_raise(data, mask):
    nvidia.parse_efivar_bool(data)
    nvidia.decode_throttle_reasons(mask)
    versions.cuda_from_int(mask)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, 60000), junk=st.text(max_size=50))
def test_truncated_real_xml_never_raises(cut, junk):
    xml = real("nvidia-smi-xml/rtx-3090-525.147.05.xml")
    d = nvidia.parse_smi_xml(xml[:cut] + junk)
    assert isinstance(d["gpus"], list)


@pytest.mark.parametrize("word", ["Not Found", "N/A", "[N/A]", "[Not Supported]", "[Insufficient Permissions]",
                                  "[Unknown Error]", "[GPU is lost]"])
def test_smi_xml_placeholder_words_are_no_versions(word):
    """nvidia-smi prints a word where it could not read a value (<cuda_version>Not Found</...>
    where it found no libcuda): the driver's and CUDA's versions are then unknown, not that word."""
    xml = (f"<nvidia_smi_log><driver_version>{word}</driver_version><cuda_version>{word}</cuda_version>"
           f"<gpu id=\"00000000:01:00.0\"><product_name>Tesla K80</product_name><uuid>{word}</uuid></gpu></nvidia_smi_log>")
    got = nvidia.parse_smi_xml(xml)
    assert got["driver_version"] is None and got["cuda_driver_version"] is None
    assert got["gpus"][0]["uuid"] is None and got["gpus"][0]["unknown"]["uuid"]
