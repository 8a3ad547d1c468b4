"""The transport's client (debtorch/transport/client.py) where it needs no torch: a worker asked again
after it was killed."""

import sys

import pytest

from debtorch.transport.client import Worker, WorkerError


@pytest.mark.slow  # starts a process of the interpreter (no torch imported)
def test_a_killed_worker_asked_to_start_again_is_a_died_error_not_a_crash():
    w = Worker(sys.executable, "debtorch.no_such_module", timeout=5)
    w.spawn()
    w.kill()   # a timeout or Ctrl-C kills it; a caller may still ask
    with pytest.raises(WorkerError) as info:
        w.start()
    assert info.value.kind == "died" and str(info.value) == "the worker is not running"
