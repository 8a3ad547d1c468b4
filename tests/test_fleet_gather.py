"""debtorch fleet gathered for real: torch.distributed.run (torchrun) with gloo on localhost, each
rank replaying a recorded machine (--host DIR with {rank}), and ranks started by hand (the
"any launcher" variables) beside misbehaving peers (tests/fleet_peer.py).  Slow: every rank
imports torch in its torch side."""

import json
import os
import socket
import subprocess
import sys

import pytest
from clitools import ROOT, at_once
from hostkit import change_nvml, facts_of, make_host, with_torch

SERVER = "debian12-server-8xa100-nvlink"
pytestmark = [pytest.mark.slow, pytest.mark.torch]


def _env(extra=None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                "VIRTUAL_ENV"):
        env.pop(var, None)
    env.update(extra or {})
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, *args, timeout=240):
    """torchrun --nproc-per-node N -m debtorch fleet ARGS; (exit status, rank 0's JSON report)."""
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nproc}", "-m", "debtorch", "fleet", "--json", *args],
                          capture_output=True, text=True, env=_env(), timeout=timeout)
    out = proc.stdout
    assert "{" in out, proc.stderr[-3000:]
    return proc.returncode, json.loads(out[out.index("{"):])


def hostname(host, name):
    (host.root / "proc/sys/kernel/hostname").write_text(name + "\n")
    return host


def test_torchrun_four_ranks_every_difference_found_and_named(tmp_path):
    env = json.loads((ROOT / "tests/hosts" / SERVER / "_host.json").read_text())["environ"]
    env = dict(env, NCCL_SOCKET_IFNAME="=ib0")
    r0 = hostname(make_host(tmp_path, base=SERVER, name="r0", meta={"environ": env}), "node0")
    r3 = hostname(make_host(tmp_path, base=SERVER, name="r3", meta={"environ": env}), "node3")
    # r1: the same server, with one difference in every answer the fleet compares.
    r1 = with_torch(tmp_path, SERVER, "2.4.0+cu121", cuda="12.1", name="r1",
                    dists={"nvidia-nccl-cu12": "2.18.1", "nvidia-cudnn-cu12": "8.9.2.26",
                           "nvidia-cuda-runtime-cu12": "12.1.100"},
                    meta={"environ": dict(env, CUDA_VISIBLE_DEVICES="0,1,2,3", NCCL_IB_TIMEOUT="22"),
                          "affinity": list(range(20)), "rlimits": {"MEMLOCK": [65536, 65536]},
                          "statvfs": {"/dev/shm": {"total": 64 * 2 ** 20, "free": 64 * 2 ** 20, "used": 0}}},
                    files={"/proc/sys/kernel/osrelease": "6.1.0-31-amd64\n",
                           "/sys/class/net/ib0/mtu": "2044\n",
                           "/sys/class/infiniband/mlx5_0/ports/1/rate": "100 Gb/sec (4X EDR)\n"},
                    commands={"ofed_info -s": "MLNX_OFED_LINUX-5.8-1.0.1.1:\n"})
    r1 = hostname(change_nvml(r1, lambda d: d["system"].update(nvmlSystemGetDriverVersion="535.129.03")), "node1")
    # r2: another machine altogether (other GPU, Python, no InfiniBand: ib0 matches nothing there).
    nic = "/sys/class/net/enp5s0"
    r2 = hostname(make_host(tmp_path, base="debian13-workstation-rtx3080", name="r2",
                            meta={"environ": {"NCCL_SOCKET_IFNAME": "=ib0"}},
                            files={f"{nic}/operstate": "up\n", f"{nic}/flags": "0x1003\n", f"{nic}/mtu": "1500\n",
                                   f"{nic}/type": "1\n"}), "node2")
    # A config tuned on node0: the nodes unlike it are named.
    (tmp_path / "facts0.json").write_text(json.dumps(facts_of(r0)))
    cfg = tmp_path / "debtorch.toml"
    subprocess.run([sys.executable, "-m", "debtorch", "tune", "--facts", str(tmp_path / "facts0.json"),
                    "--write", str(cfg)], env=_env(), check=True, capture_output=True)
    assert {r0.root.name, r1.root.name, r2.root.name, r3.root.name} == {"r0", "r1", "r2", "r3"}

    code, report = torchrun(4, "--host", str(tmp_path / "r{rank}"), "--tuned", str(cfg))

    assert code == 1 and report["exit_code"] == 1
    assert report["nodes"]["expected"] == 4 and report["nodes"]["compared"] == 4
    assert report["nodes"]["groups"][0] == {"count": 2, "nodes": "node[0,3]", "differs_in": []}
    found = {f["id"] for f in report["findings"]}
    every = {"fleet.E005", "fleet.E006", "fleet.E007", "fleet.E008", "fleet.W001", "fleet.W002", "fleet.W003",
             "fleet.W004", "fleet.W005", "fleet.W006", "fleet.W007", "fleet.W008", "fleet.W009", "fleet.W010",
             "fleet.W011", "fleet.W012", "fleet.W013", "fleet.W014", "fleet.E009", "fleet.W015"}
    assert every <= found, sorted(every - found)
    torch = next(f for f in report["findings"] if f["id"] == "fleet.E005")
    assert {g["value"]: g["nodes"] for g in torch["groups"]} == {
        "2.4.1+cu121 (CUDA 12.1)": "node[0,3]", "2.4.0+cu121 (CUDA 12.1)": "node1",
        "2.13.0+cu130 (CUDA 13.0)": "node2"}


def test_torchrun_four_identical_ranks_give_no_difference(tmp_path):
    for r in range(4):
        hostname(make_host(tmp_path, base="debian12-vm-2core", name=f"r{r}"), f"vm{r}")
    code, report = torchrun(4, "--host", str(tmp_path / "r{rank}"))
    assert report["nodes"]["groups"] == [{"count": 4, "nodes": "vm[0-3]", "differs_in": []}]
    assert [f for f in report["findings"] if f["section"] != "doctor"] == []
    assert code == report["exit_code"] == 0


def test_srun_variables_two_tasks_meet_and_agree(tmp_path):
    """What srun sets (no RANK/WORLD_SIZE): rank 0 is the first node of the list and hosts the store."""
    for r in (0, 1):
        hostname(make_host(tmp_path, base="debian12-vm-2core", name=f"r{r}"), f"vm{r}")
    common = {"SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost,localhost", "SLURM_JOB_ID": "4242",
              "SLURM_STEP_ID": "0", "MASTER_PORT": str(_free_port())}
    procs = [subprocess.Popen([sys.executable, "-m", "debtorch", "fleet", "--json", "--host", str(tmp_path / "r{rank}"),
                               "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(dict(common, SLURM_PROCID=str(r)))) for r in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    report = json.loads(outs[0][0])
    assert report["nodes"]["groups"] == [{"count": 2, "nodes": "vm[0-1]", "differs_in": []}], outs[1][1]
    assert [p.returncode for p in procs] == [report["exit_code"]] * 2 and outs[1][0] == ""


def test_probe_measures_every_rank_within_its_budget_and_writes_the_exclude_list(tmp_path):
    for r in range(3):
        hostname(make_host(tmp_path, base="debian12-vm-2core", name=f"r{r}"), f"vm{r}")
    exclude = tmp_path / "bad-nodes"
    code, report = torchrun(3, "--host", str(tmp_path / "r{rank}"), "--probe", "--budget", "8",
                            "--exclude-file", str(exclude))
    probe = report["probe"]
    assert [n["node"] for n in probe["nodes"]] == ["vm0", "vm1", "vm2"]
    assert all(n["gflops"] > 0 and n["partners"] == 2 for n in probe["nodes"])
    assert len(probe["pairs"]) == 3 and all(p["busbw_gbs"] > 0 for p in probe["pairs"])
    # Whatever the machine's noise made of it, the file holds exactly the nodes the report names.
    assert exclude.read_text().strip() == probe["exclude"]
    assert code == report["exit_code"]


# -- the runs that mostly wait (for ranks that never come, for a rank 0 that is not there), run at once

SECRETS = [None, "a secret the ranks share, not the attacker"]


def _hostile(tmp_path, secret):
    """Two ranks and a hostile peer writing into rank 0's store (what the hostile test judges):
    (the ranks, their (stdout, stderr, seconds)), the world size and the timeout."""
    import time

    port = _free_port()
    for r in (0, 1):
        hostname(make_host(tmp_path, base="debian12-vm-2core", name=f"r{r}"), f"vm{r}")
    (tmp_path / "facts.json").write_text(json.dumps(facts_of(make_host(tmp_path, base="debian12-vm-2core", name="x"))))
    timeout = 15
    world = 4 if secret is None else 3
    common = {"WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if secret:
        common["DEBTORCH_FLEET_SECRET"] = secret
    attacks = ["2:bomb", "3:nohello", "-:flood"] if secret is None else [f"2:unsigned={tmp_path / 'facts.json'}",
                                                                         "-:forge", "-:flood"]
    started = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, "-m", "debtorch", "fleet", "--json", "--host", str(tmp_path / "r{rank}"),
                               "--timeout", str(timeout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(dict(common, RANK=str(r)))) for r in (0, 1)]
    attacker = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fleet_peer.py"), "127.0.0.1", str(port),
                                 "debtorch-fleet/env/0/", *attacks], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env())
    outs = []
    for p in ranks:
        outs.append(p.communicate(timeout=300))
        outs[-1] += (time.monotonic() - started,)
    attacker.kill()
    attacker.communicate()
    return ranks, outs, world, timeout


def _missing(tmp_path):
    """Six ranks: two real ones, three peers that die or send bad documents, one that never starts:
    (the ranks, their (stdout, stderr), the peers' (stdout, stderr))."""
    port = _free_port()
    for r in (0, 1):
        hostname(make_host(tmp_path, base="debian12-vm-2core", name=f"r{r}"), f"vm{r}")
    common = {"WORLD_SIZE": "6", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    ranks = [subprocess.Popen([sys.executable, "-m", "debtorch", "fleet", "--json", "--host", str(tmp_path / "r{rank}"),
                               "--timeout", "15"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(dict(common, RANK=str(r)))) for r in (0, 1)]
    peers = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fleet_peer.py"), "127.0.0.1", str(port),
                              "debtorch-fleet/env/0/", "2:died", "3:malformed", "4:schema"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    outs = [p.communicate(timeout=180) for p in ranks]
    return ranks, outs, peers.communicate(timeout=60)


def _unreachable(tmp_path):
    hostname(make_host(tmp_path, base="debian12-vm-2core", name="r1"), "vm1")
    env = _env({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    return subprocess.run([sys.executable, "-m", "debtorch", "fleet", "--host", str(tmp_path / "r1"),
                           "--timeout", "3"], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def waiting(tmp_path_factory):
    """The runs that mostly wait (for ranks that never come, for a rank 0 that is not there), all at
    once: "missing", "unreachable" and each of SECRETS (the hostile runs) -> what it returned."""
    runs = {"missing": _missing, "unreachable": _unreachable,
            **{s: (lambda d, s=s: _hostile(d, s)) for s in SECRETS}}
    folders = {key: tmp_path_factory.mktemp("waiting") for key in runs}
    return at_once({key: (lambda run=run, d=folders[key]: run(d)) for key, run in runs.items()}, workers=len(runs))


def test_missing_dead_and_unreadable_nodes_are_named_and_every_rank_exits_with_the_verdict(waiting):
    ranks, outs, (peer_out, peer_err) = waiting["missing"]
    report = json.loads(outs[0][0])
    status = {n["rank"]: (n["name"], n["status"]) for n in report["nodes"]["not_compared"]}
    assert status == {2: ("peer-died", "died"), 3: ("peer-malformed", "malformed"),
                      4: ("peer-schema", "schema"), 5: ("rank 5", "missing")}
    assert report["nodes"]["compared"] == 2 and report["nodes"]["groups"][0]["nodes"] == "vm[0-1]"
    assert {f["id"] for f in report["findings"] if f["section"] == "nodes"} == \
        {"fleet.E001", "fleet.E002", "fleet.E003", "fleet.E004"}
    assert [p.returncode for p in ranks] == [1, 1], outs[1][1]
    assert outs[1][0] == ""                     # only rank 0 prints the report
    assert sorted(peer_out.split("\n")[:2]) == ["3 1", "4 1"], peer_err


def test_a_rank_that_cannot_reach_rank_0_exits_1_within_its_timeout(waiting):
    proc = waiting["unreachable"]
    assert proc.returncode == 1
    assert "reach rank 0" in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("secret", SECRETS)
def test_a_hostile_process_forges_floods_and_bombs_the_store_and_changes_nothing(waiting, secret):
    """Issue 23: a process that is not a rank writes into rank 0's store: ranks out of range, a
    joined entry without hello, a 1 MB document that decompresses to 1 GiB under a name made of
    terminal escapes, tens of MB of junk, and (with a secret) a well-formed unsigned document, a
    forged plan asking for a 500 s probe and a forged verdict of 0.  The report names what it
    must, every rank exits with rank 0's code, and every rank ends well within its bound."""
    ranks, outs, world, timeout = waiting[secret]
    report = json.loads(outs[0][0])
    status = {n["rank"]: (n["name"], n["status"], n["detail"]) for n in report["nodes"]["not_compared"]}
    if secret is None:
        assert status == {2: ("evil\\x1b\\x5d0\\x3bpwned\\x07\\x2cgpu01\\x0ahost", "malformed",
                              "larger than 8 MiB once decompressed"),
                          3: ("rank 3", "missing", "did not join")}, status
    else:
        assert status == {2: ("peer-unsigned", "malformed", "not signed with the fleet's secret")}, status
        assert "probe" not in report                       # the forged plan ran nothing
    assert report["nodes"]["expected"] == world and report["nodes"]["compared"] == 2
    assert report["nodes"]["groups"][0]["nodes"] == "vm[0-1]"
    assert [p.returncode for p in ranks] == [report["exit_code"]] * 2 == [1, 1], outs[1][1]
    bound = 2 * timeout + 90
    assert all(o[2] < bound for o in outs), [o[2] for o in outs]
    assert "\x1b" not in outs[0][0] + outs[0][1] + outs[1][1]


def test_world_size_beyond_the_bound_is_refused_at_once():
    env = _env({"RANK": "0", "WORLD_SIZE": "100000000", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    proc = subprocess.run([sys.executable, "-m", "debtorch", "fleet"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "debtorch fleet: WORLD_SIZE=100000000: debtorch fleet takes 1 to 65536 processes\n"
