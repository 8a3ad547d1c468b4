"""Network facts (debtorch/facts/network.py), the machine view's reading of them, the doctor's
network checks (each with a machine that triggers it and one that does not), Slurm's allocation
in the machine view and tune, and Slurm host lists."""

import json

from hostkit import HOSTS, diagnose, facts_of, ids, make_host
from hypothesis import given
from hypothesis import strategies as st

from debtorch import hostlist
from debtorch.facts import network
from debtorch.host import RecordingHost, ReplayHost, Unavailable
from debtorch.machine import Machine, select_interfaces
from debtorch.tune import rules

SERVER = "debian12-server-8xa100-nvlink"


def server(tmp_path, env=None, **make):
    meta = dict(make.pop("meta", {}) or {})
    if env:
        base = json.loads((HOSTS / SERVER / "_host.json").read_text())["environ"]
        meta["environ"] = {**base, **env}
    return make_host(tmp_path, base=SERVER, meta=meta, **make)


def network_ids(host):
    return [i for i in ids(diagnose(host)) if i.startswith("network.")]


# ---------------------------------------------------------------- facts


def test_the_server_fixture_reads_its_interfaces_infiniband_port_and_ofed(replay):
    net = facts_of(replay(SERVER))["network"]
    by_name = {i["name"]: i for i in net["interfaces"]}
    assert by_name["ib0"]["mtu"] == 4092 and by_name["ib0"]["link_type"] == "infiniband"
    assert by_name["eth0"]["speed_mbps"] == 25000 and by_name["eth0"]["addresses"] == ["10.10.0.7/16"]
    assert by_name["lo"]["virtual"] is True and by_name["eth0"]["virtual"] is False
    port = net["infiniband"][0]
    assert (port["device"], port["state"], port["rate_gbps"], port["netdevs"]) == ("mlx5_0", "ACTIVE", 200.0, ["ib0"])
    assert net["ofed_version"] == "23.10-0.5.5.0"


def test_a_machine_without_sysfs_net_says_why(replay):
    net = facts_of(replay("debian12-nouveau-gtx1070ti"))["network"]
    assert net["interfaces"] is None and "not present" in net["unknown"]["interfaces"]
    assert "command not found" in net["unknown"]["ofed_version"]


def test_master_addr_resolution_is_replayed_never_asked_live(tmp_path, no_live):
    host = server(tmp_path, env={"MASTER_ADDR": "gpu-node-01"}, meta={"resolve": {"gpu-node-01": ["10.10.0.1"]}})
    assert facts_of(host)["network"]["master_addr"] == {"name": "gpu-node-01", "addresses": ["10.10.0.1"]}
    host = server(tmp_path, env={"MASTER_ADDR": "elsewhere"})
    net = facts_of(host)["network"]
    assert net["master_addr"] is None and "not recorded" in net["unknown"]["master_addr"]


def test_recording_keeps_what_the_resolver_said(tmp_path, monkeypatch):
    import socket

    def fake(name, *a, **k):
        if name == "gone":
            raise socket.gaierror(-2, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    rec = RecordingHost(tmp_path / "rec")
    assert rec.resolve("master") == ["10.1.2.3"]
    try:
        rec.resolve("gone")
    except Unavailable as exc:
        assert "Name or service not known" in exc.reason
    rec.save()
    replayed = ReplayHost(tmp_path / "rec")
    assert replayed.resolve("master") == ["10.1.2.3"]
    try:
        replayed.resolve("gone")
        raise AssertionError("a recorded failure must replay as a failure")
    except Unavailable as exc:
        assert "Name or service not known" in exc.reason


@given(st.text(max_size=300))
def test_network_parsers_never_raise(text):
    network.parse_ip_addr_json(text)
    network.parse_ib_state(text)
    network.parse_ib_rate(text)
    network.parse_ofed_info(text)


def test_parsers_on_real_formats():
    assert network.parse_ib_state("4: ACTIVE\n") == "ACTIVE"
    assert network.parse_ib_rate("25 Gb/sec (1X EDR)") == 25.0          # procfs fixture mlx5_0
    assert network.parse_ofed_info("MLNX_OFED_LINUX-5.8-1.0.1.1:\n") == "5.8-1.0.1.1"
    assert network.parse_ofed_info("OFED-internal-24.04-0.6.6:\n") == "24.04-0.6.6"
    assert network.parse_ip_addr_json('[{"ifname": "eth0", "addr_info": [{"local": "10.0.0.1", "prefixlen": 8}]}]') \
        == {"eth0": ["10.0.0.1/8"]}


# ---------------------------------------------------------------- the machine view


def test_nccl_prefix_exact_and_exclude_syntax(replay):
    ifaces = Machine(facts_of(replay(SERVER))).network.interfaces
    assert select_interfaces("NCCL_SOCKET_IFNAME", "ib", ifaces) == ("ib0",)
    assert select_interfaces("NCCL_SOCKET_IFNAME", "=eth", ifaces) == ()
    assert select_interfaces("NCCL_SOCKET_IFNAME", "^eth,lo", ifaces) == ("ib0",)
    assert select_interfaces("NCCL_SOCKET_IFNAME", "^=eth0", ifaces) == ("ib0", "lo")
    assert select_interfaces("GLOO_SOCKET_IFNAME", "eth", ifaces) == ()       # gloo: exact names only
    assert select_interfaces("GLOO_SOCKET_IFNAME", "eth0,ib0", ifaces) == ("eth0", "ib0")


def test_slurm_cpus_per_task_bounds_usable_cpus_and_tune_uses_it(tmp_path):
    plain = facts_of(server(tmp_path))
    alloc = facts_of(server(tmp_path, env={"SLURM_JOB_ID": "4811", "SLURM_CPUS_PER_TASK": "8",
                                           "SLURM_NODELIST": "gpu-node-[07-08]", "SLURM_GPUS_ON_NODE": "8"}))
    m = Machine(alloc)
    assert (Machine(plain).cpus.usable, m.cpus.usable, m.cpus.allocation) == (40, 8, 8)
    assert "SLURM_CPUS_PER_TASK=8" in m.cpus.note
    assert m.slurm.nodes == ["gpu-node-07", "gpu-node-08"] and m.slurm.gpus_on_node == 8
    req = rules.Request(nproc=1)
    assert rules.recommend(plain, req).per_process_cpus == 40
    rec = rules.recommend(alloc, req)
    assert rec.per_process_cpus == 8
    assert any("SLURM_CPUS_PER_TASK" in r.text for r in rec.reasons.values())


# ---------------------------------------------------------------- doctor checks


def test_ifname_matching_nothing_is_network_E001_and_a_matching_prefix_is_clean(tmp_path):
    assert network_ids(server(tmp_path, env={"NCCL_SOCKET_IFNAME": "enp65s0"})) == ["network.E001"]
    assert network_ids(server(tmp_path, env={"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "eth0"})) == []


def test_ifname_selecting_a_down_interface_is_network_E002(tmp_path):
    down = server(tmp_path, env={"NCCL_SOCKET_IFNAME": "=ib0"},
                  files={"/sys/class/net/ib0/operstate": "down\n", "/sys/class/net/ib0/carrier": "0\n"})
    assert network_ids(down) == ["network.E002"]
    assert network_ids(server(tmp_path, env={"NCCL_SOCKET_IFNAME": "=ib0"})) == []


def test_loopback_only_in_a_multi_node_job_is_network_W002(tmp_path):
    assert network_ids(server(tmp_path, env={"NCCL_SOCKET_IFNAME": "lo", "SLURM_NNODES": "2"})) == ["network.W002"]
    assert network_ids(server(tmp_path, env={"NCCL_SOCKET_IFNAME": "lo"})) == []      # one node: lo is fine


def test_master_addr_that_does_not_resolve_is_network_E003(tmp_path):
    bad = server(tmp_path, env={"MASTER_ADDR": "gpu-node-99"},
                 meta={"resolve": {"gpu-node-99": {"error": "does not resolve (Name or service not known)"}}})
    found = [f for f in diagnose(bad) if f.id.startswith("network.")]
    assert [f.id for f in found] == ["network.E003"] and "gpu-node-99" in found[0].message
    good = server(tmp_path, env={"MASTER_ADDR": "gpu-node-01"}, meta={"resolve": {"gpu-node-01": ["10.10.0.1"]}})
    assert network_ids(good) == []


def test_infiniband_port_in_INIT_is_network_W001_and_a_down_port_is_info(tmp_path):
    init = server(tmp_path, files={"/sys/class/infiniband/mlx5_0/ports/1/state": "2: INIT\n"})
    assert network_ids(init) == ["network.W001"]
    down = server(tmp_path, files={"/sys/class/infiniband/mlx5_0/ports/1/state": "1: DOWN\n",
                                   "/sys/class/infiniband/mlx5_0/ports/1/phys_state": "3: Disabled\n"})
    assert network_ids(down) == ["network.I001"]
    assert network_ids(server(tmp_path)) == []


# ---------------------------------------------------------------- host lists


def test_host_lists_as_slurm_writes_them():
    assert hostlist.expand("node[01-03,07],gpu-a[1-2]") == ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"]
    assert hostlist.expand("rack[1-2]-n[0-1]") == ["rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1"]
    assert hostlist.compress(["node07", "node01", "node02", "node03", "login"]) == "login,node[01-03,07]"
    assert hostlist.first("c[100-101]") == "c100"


HOSTNAME = st.from_regex(r"[a-z]{1,4}(-[a-z]{1,3})?[0-9]{0,3}", fullmatch=True)


@given(st.lists(HOSTNAME, max_size=30))
def test_compress_expands_back_to_the_same_names(names):
    assert sorted(set(hostlist.expand(hostlist.compress(names)))) == sorted(set(names))


@given(st.one_of(st.text(max_size=60), st.none(), st.integers()))
def test_expand_never_raises(text):
    assert isinstance(hostlist.expand(text), list)
