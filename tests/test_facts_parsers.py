"""The OS, APT, CPU, memory, storage and probe parsers: real captured text, and arbitrary text never raises."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import versions
from debtorch.facts import apt, collectenv, cpu, memory, osinfo, pyenv, storage
from debtorch.machine import Machine

REAL = Path(__file__).resolve().parent / "real"


def os_of(name: str):
    """The machine view's reading of a real /etc tree."""
    etc = REAL / "os-release" / name / "etc"
    sec = osinfo.identify(osinfo.parse_os_release((etc / "os-release").read_text()))
    sec["debian_version"] = (etc / "debian_version").read_text().strip()
    return Machine.from_facts({"os": sec}).os


def test_debian_releases_from_real_os_release_files():
    d13 = os_of("debian13").debian
    assert (d13.release, d13.point_release, d13.relation) == ("13", "13.1", "supported")
    assert (os_of("debian10").debian.codename, os_of("debian10").debian.relation) == ("buster", "older")
    # Testing has no VERSION_ID; debian_version says "bookworm/sid".
    testing = os_of("debiantesting").debian
    assert (testing.release, testing.codename) == ("testing", "bookworm")


def test_ubuntu_is_a_derivative_not_debian():
    u = os_of("ubuntu24")
    assert (u.is_debian, u.derivative, u.debian.release) == (False, True, "13")


@pytest.mark.parametrize("name, model, sockets, cores, logical, flags", [
    ("intel-xeon-e5-2650v3-2socket-40t-cpuinfo", "Intel(R) Xeon(R) CPU E5-2650 v3 @ 2.30GHz", 2, 20, 40, {"avx2"}),
    ("intel-core-i7-8650u-8t-laptop-cpuinfo", "Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz", 1, 4, 8, {"avx2"}),
    # Arm: no "model name", no core ids; the board's name and one core per processor.
    ("raspberrypi4-aarch64-cpuinfo", "Raspberry Pi 4 Model B Rev 1.1", 1, 4, 4, {"asimd"}),
])
def test_real_cpuinfo(name, model, sockets, cores, logical, flags):
    info = cpu.parse_cpuinfo((REAL / "cpuinfo" / name).read_text())
    assert (info["model"], info["sockets"], info["physical_cores"], info["logical"]) == (model, sockets, cores, logical)
    assert flags <= info["flags"] and "avx512f" not in info["flags"]


def test_deb822_and_one_line_sources_give_the_same_components():
    one = apt.parse_one_line_sources("deb http://deb.debian.org/debian bookworm main contrib # x\n"
                                     "deb-src http://deb.debian.org/debian bookworm main\n")
    deb822 = apt.parse_deb822_sources("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-backports\n"
                                      "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                                      "Types: deb\nURIs: http://x\nSuites: sid\nComponents: non-free\nEnabled: no\n")
    view = {name: Machine.from_facts({"apt": {"sources": entries, **apt.summarise(entries)}}).apt
            for name, entries in (("one", one), ("deb822", deb822))}
    assert view["one"].components == view["deb822"].components == ["main", "contrib"]
    assert view["deb822"].backports and not view["one"].backports


def test_cgroup_quota_and_cpu_lists():
    assert cpu.parse_cgroup_v2_cpu_max("250000 100000\n") == 2.5
    assert cpu.parse_cgroup_v2_cpu_max("max 100000\n") is None
    assert cpu.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_mountinfo_longest_mount_point_holds_the_path():
    text = ("22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
            "40 22 0:40 / /data\\040set rw - nfs4 srv:/export rw\n")
    m = storage.mount_for(storage.parse_mountinfo(text), "/data set/train")
    assert (m["mount_point"], m["fstype"]) == ("/data set", "nfs4")
    assert storage.mount_for(storage.parse_mountinfo(text), "/home")["fstype"] == "ext4"


TEXT_PARSERS = [
    osinfo.parse_os_release, osinfo.parse_glibc, apt.parse_one_line_sources, apt.parse_deb822_sources,
    apt.parse_dpkg_status, apt.trim_dpkg_status, cpu.parse_cpuinfo, cpu.parse_cpu_list, cpu.parse_cgroup_v2_cpu_max,
    memory.parse_meminfo, memory.parse_bracketed_choice, storage.parse_mountinfo, storage.parse_link_speed,
    pyenv.parse_probe_output,
]
REALISH = st.sampled_from([(REAL / "cpuinfo" / "raspberrypi4-aarch64-cpuinfo").read_text(),
                           (REAL / "os-release" / "ubuntu24" / "etc" / "os-release").read_text()])
MANGLED = st.builds(lambda t, cut, noise: t[:cut] + noise + t[cut:], REALISH, st.integers(0, 1000), st.text(max_size=40))


@pytest.mark.parametrize("parser", TEXT_PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None)
@given(text=st.one_of(st.text(max_size=400), MANGLED))
def test_parsers_never_raise(parser, text):
    parser(text)


MAYBE = st.one_of(st.none(), st.text(max_size=20))


@settings(max_examples=60, deadline=None)
@given(osr=st.dictionaries(st.sampled_from(["ID", "ID_LIKE", "VERSION_ID", "VERSION_CODENAME"]), st.text(max_size=20)),
       dv=MAYBE, version=MAYBE, cuda=MAYBE, hip=MAYBE, kernel=st.text(max_size=40))
def test_decisions_on_parsed_values_never_raise(osr, dv, version, cuda, hip, kernel):
    Machine.from_facts({"os": {**osinfo.identify(osr, {"codename": dv or ""}), "debian_version": dv}}).os
    osinfo.detect_wsl(kernel, kernel)
    versions.variant_of(version, cuda, hip)
    storage.mount_for(storage.parse_mountinfo(kernel), kernel)


def test_light_probe_survives_an_unreadable_folder(tmp_path):
    """One folder it cannot list (a wheel's lib dir with odd permissions) costs that listing, not the probe."""
    import json
    import subprocess
    import sys

    from debtorch.probes import source

    site = tmp_path / "site-packages"
    (site / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").write_text("")
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "lib" / "libtorch_cuda.so").write_text("")
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cu128'\ncuda = '12.8'\n")
    # Root reads every folder, so the refusal is simulated: listing anything under nvidia/ fails.
    wrapper = ("import os, sys; real = os.listdir\n"
               "def listdir(p='.'):\n"
               "    if os.sep + 'nvidia' in str(p): raise PermissionError(13, 'Permission denied', str(p))\n"
               "    return real(p)\n"
               "os.listdir = listdir\n"
               f"sys.path.insert(0, {str(site)!r})\n")
    r = subprocess.run([sys.executable, "-c", wrapper + source("light")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["torch"]["version"] == "2.13.0+cu128"
    assert any(p.endswith("libtorch_cuda.so") for p in doc["libraries"])
    assert not any("nvidia" in p for p in doc["libraries"])


# Old Arm kernels print the CPU's description once after the processor list (32-bit and
# early arm64 kernels alike); newer ones repeat it in every processor's block.
OLD_ARM_LAYOUTS = [
    ("Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\nBogoMIPS\t: 1392.74\n\nprocessor\t: 1\n"
     "BogoMIPS\t: 1363.33\n\nFeatures\t: swp half thumb fastmult vfp edsp neon vfpv3\nCPU implementer\t: 0x41\n"
     "CPU architecture: 7\nCPU part\t: 0xc09\n\nHardware\t: OMAP4 Panda board\n", 2, "ARM", {"asimd"}),
    ("Processor\t: AArch64 Processor rev 0 (aarch64)\nprocessor\t: 0\nprocessor\t: 1\nprocessor\t: 2\n"
     "processor\t: 3\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\nCPU implementer\t: 0x50\n"
     "CPU architecture: AArch64\nCPU part\t: 0x000\n\nHardware\t: APM X-Gene Mustang board\n", 4, "APM", {"asimd"}),
]


@pytest.mark.parametrize("text, logical, vendor, features", OLD_ARM_LAYOUTS)
def test_old_arm_layout_shares_one_description_after_the_processors(text, logical, vendor, features):
    got = cpu.parse_cpuinfo(text)
    assert got["logical"] == logical and got["vendor"] == vendor
    assert {f for f in cpu.FEATURES if f in got["flags"]} == features


@pytest.mark.parametrize("features, simd", [
    ("half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae", True),   # 32-bit Arm
    ("fp asimd evtstrm aes pmull sha1 sha2 crc32", True),                                     # arm64
    ("swp half thumb fastmult vfp edsp java tls", False),                                     # ARMv6: no SIMD
])
def test_32_bit_arms_neon_is_advanced_simd(features, simd):
    """Issue 22: 32-bit Arm kernels print Advanced SIMD as "neon", arm64 ones as "asimd"; the
    facts name one feature once, whichever the kernel (and lscpu in a collect_env report)."""
    got = cpu.parse_cpuinfo(f"processor\t: 0\nFeatures\t: {features}\nCPU implementer\t: 0x41\n")
    assert ("asimd" in got["flags"]) is simd
    report = ("PyTorch version: 2.1.0\nIs debug build: False\nCUDA used to build PyTorch: None\nOS: Raspbian GNU/Linux 11 "
              f"(bullseye) (armv7l)\n\nCPU:\nArchitecture: armv7l\nFlags: {features}\n")
    assert collectenv.parse(report)["cpu"]["features"]["asimd"] is simd


# Linux Mint 17.2 keeps Ubuntu 14.04's os-release beside its own lsb-release (the two files as
# `cat /etc/*release` printed them in a script of the search index, id 44481715071).
MINT_17_LSB = 'DISTRIB_ID=LinuxMint\nDISTRIB_RELEASE=17.2\nDISTRIB_CODENAME=rafaela\nDISTRIB_DESCRIPTION="Linux Mint 17.2 Rafaela"\n'
UBUNTU_14_OS_RELEASE = ('NAME="Ubuntu"\nVERSION="14.04.3 LTS, Trusty Tahr"\nID=ubuntu\nID_LIKE=debian\n'
                        'PRETTY_NAME="Ubuntu 14.04.3 LTS"\nVERSION_ID="14.04"\n')


@pytest.mark.parametrize("os_release, lsb, codename", [
    (UBUNTU_14_OS_RELEASE, MINT_17_LSB, "trusty"),              # Mint's own name never beside Ubuntu's os-release
    ('ID=ubuntu\nVERSION="16.04"\nUBUNTU_CODENAME=xenial\n', MINT_17_LSB, "xenial"),
    ('ID=linuxmint\nVERSION="18.2 (Sonya)"\nVERSION_CODENAME=sonya\nUBUNTU_CODENAME=xenial\n', "", "sonya"),
    ('ID=linuxmint\nVERSION_ID="17.2"\n', MINT_17_LSB, "rafaela"),  # the same distribution in both files
    ("", MINT_17_LSB, "rafaela"),                               # no os-release at all
])
def test_a_codename_belongs_to_the_distribution_os_release_names(os_release, lsb, codename):
    got = osinfo.identify(osinfo.parse_os_release(os_release), osinfo.parse_lsb_release(lsb))
    assert got["codename"] == codename


@pytest.mark.parametrize("code, vendor", [("0x41", "ARM"), ("0x43", "Cavium"), ("0x46", "Fujitsu"), ("0x48", "HiSilicon"),
                                          ("0x4e", "NVIDIA"), ("0x50", "APM"), ("0x70", "Phytium"), ("0xc0", "Ampere"),
                                          ("0x7f", "0x7f")])
def test_an_arm_cpu_is_named_by_its_implementer_code(code, vendor):
    """Every implementer code the Arm architecture assigns names its vendor (the names lscpu
    prints); a code no list knows stays the code."""
    text = f"processor\t: 0\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd\nCPU implementer\t: {code}\nCPU part\t: 0x0a1\n"
    assert cpu.parse_cpuinfo(text)["vendor"] == vendor


# dpkg status text: stanzas of the packages debtorch wants and others, with the odd
# separators, comments, continuation lines and line breaks that _stanzas handles.
DPKG_BREAK = st.sampled_from(["\n", "\r\n", "\r", "\x0b", "\x1c", "\x85", "\u2028"])
DPKG_NAME = st.sampled_from(["nvidia-driver", "libc6", "python3", "cuda-toolkit-12-4", "bash", "nvidia-driver foo",
                             "libc6x", "", "libnccl2 "])
DPKG_EXTRA = st.one_of(st.sampled_from(
    ["Version: 1.2-3", "Architecture: amd64", " continued", " .", "# comment", "Package : libc6", "\tPackage: python3",
     "", " ", "\t \t", "\x0c", "Description: x", "Package:nvidia-smi", "Status: deinstall ok config-files"]),
    st.text(max_size=12))
DPKG_STANZA = st.builds(
    lambda name, status, extra: [f"Package: {name}"] + (["Status: install ok installed"] if status else []) + extra,
    DPKG_NAME, st.booleans(), st.lists(DPKG_EXTRA, max_size=4))


@settings(max_examples=150, deadline=None)
@given(stanzas=st.lists(st.tuples(DPKG_STANZA, st.lists(DPKG_BREAK, min_size=3, max_size=3)), max_size=8),
       between=st.sampled_from(["\n", "\n\n", "\n \n", "\r\n\r\n", "\n\x0c\n"]))
def test_dpkg_status_skips_unwanted_stanzas_without_changing_the_answer(stanzas, between):
    """The fast path (unwanted stanzas skipped unread) keeps exactly the packages that reading
    every stanza keeps."""
    text = between.join("".join(line + breaks[i % 3] for i, line in enumerate(lines)) for lines, breaks in stanzas)
    every = apt.parse_dpkg_status(text, wanted=None)
    assert apt.parse_dpkg_status(text) == {k: v for k, v in every.items() if apt.RELEVANT.match(k)}


def test_dpkg_status_of_a_real_machine_reads_the_wanted_packages():
    text = "".join(
        f"Package: {name}\nStatus: install ok installed\nPriority: optional\nVersion: {ver}\n"
        f"Architecture: amd64\nDescription: one\n two\n .\n three\n\n"
        for name, ver in [("bash", "5.2"), ("nvidia-driver", "535.261.03-1"), ("libc6", "2.36-9"), ("zsh", "5.9")] * 3)
    assert apt.parse_dpkg_status(text) == {
        "nvidia-driver": {"version": "535.261.03-1", "arch": "amd64", "status": "installed"},
        "libc6": {"version": "2.36-9", "arch": "amd64", "status": "installed"}}
