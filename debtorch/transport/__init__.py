"""Running code in the target interpreter (the one with torch): the transport that tune, verify-train
and fleet share, on its own floor below them (docs/engine.md).

* :mod:`debtorch.transport.client`, in debtorch's own process: :class:`~debtorch.transport.client.Worker`
  starts a module of debtorch in the target interpreter and exchanges JSON lines with it;
* :mod:`debtorch.transport.server`, in the target interpreter: the start-up, the request loop and the
  errors every torch-side module speaks (standard library only at import time).

This package file imports nothing, so that the target interpreter loads only the server.
"""
