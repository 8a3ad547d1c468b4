"""debtorch fleet: many machines, one verdict.

Two ways in, one comparison:

* offline, :func:`debtorch.fleet.offline.from_files`: ``facts --json`` / ``doctor --json`` documents
  gathered by any tool (a shared folder written by ``srun debtorch facts --json``,
  Ansible, pdsh);
* gathered, :mod:`debtorch.fleet.gather`: started once per node by the job's
  own launcher (``srun`` or ``torchrun``), each node collects its facts and
  runs its doctor, and torch.distributed's TCPStore brings the documents to
  rank 0 (in a subprocess of the user's interpreter: debtorch never imports
  torch), which compares them and tells every rank the exit code.

:mod:`debtorch.fleet.compare` turns the nodes into findings,
:mod:`debtorch.report.fleet` renders them, :mod:`debtorch.fleet.probe` plans
and judges the bad-node finder (``--probe``), :mod:`debtorch.fleet.torchside`
is what runs in the user's interpreter.  docs/fleet.md is the guide.

This package's ``__init__`` imports nothing: the torch side imports
``debtorch.fleet.torchside`` in the user's interpreter, where only the
standard library and torch can be counted on.
"""
