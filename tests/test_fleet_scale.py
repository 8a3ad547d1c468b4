"""benchmarks/fleet_scale.py kept alive (issue 33): a benchmark nobody runs breaks silently, as it did
(KeyError: 'files' in gather.read_gathered).  The fast tier runs it on 100 nodes in one process (the
gathered digests and the offline paths, whose reports it compares); the slow tier runs it as it
measures, with rank 0's torch side and the ranks in processes of their own and torch's TCPStore,
and benchmarks/fleet_store.py's protocol with 50 real client connections."""

import sys

import pytest
from clitools import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet_scale  # noqa: E402


def test_fleet_scale_runs_on_100_nodes_and_both_paths_give_one_report(capsys):
    assert fleet_scale.main(["--nodes", "100", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "100 nodes: the digests, offline reports are the same" in out
    assert "100 nodes, digests" in out and "bytes stored per node" in out


@pytest.mark.slow
@pytest.mark.torch
def test_fleet_scale_as_it_measures(capsys):
    assert fleet_scale.main(["--nodes", "60", "--repeat", "1"]) == 0
    assert "60 nodes: the digests, documents, offline reports are the same" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.torch
def test_fleet_store_serves_50_real_connections(capsys):
    import fleet_store

    assert fleet_store.main(["--ranks", "50", "--procs", "2", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "49 of 49 ranks read theirs, 0 failed [], 50 compared" in out
