"""Running code in the target interpreter: :mod:`~debtorch.transport.client` (debtorch's side) and
:mod:`~debtorch.transport.server` (the interpreter's), shared by tune, verify-train and fleet (docs/engine.md).
Imports nothing, so that the target interpreter loads only the server."""
