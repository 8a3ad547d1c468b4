"""debtorch lint's rules on small scripts: what each flags, and what it must leave alone."""

import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch.lint.api import lint_text
from debtorch.lint.checks import run_checks
from debtorch.lint.script import Script

HEAD = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
device = torch.device("cuda")
model = nn.Linear(8, 2).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def found(src: str, head: bool = True) -> list:
    """(id, line) of every finding, lines counted in ``src`` (HEAD excluded)."""
    text = (HEAD if head else "") + textwrap.dedent(src)
    offset = HEAD.count("\n") if head else 0
    res = lint_text(text, "train.py")
    assert res.error is None, res.error
    return [(f.id, f.line - offset) for f in res.findings]


def ids(src: str, head: bool = True) -> set:
    return {i for i, _ in found(src, head)}


LOOP = """\
loader = DataLoader(ds, batch_size=32, num_workers=args.workers, pin_memory=True, persistent_workers=True)
for step, (x, y) in enumerate(loader):
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    out = model(x)
    loss = criterion(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_clean_loop_has_no_findings():
    assert found(LOOP) == []


# ---------------------------------------------------------------- host waits (W001-W003)


def test_item_every_step_is_a_host_wait_but_not_under_a_logging_condition():
    assert found(LOOP + "    total = loss.item()\n") == [("script.W001", 9)]
    assert found(LOOP + "    if step % 100 == 0:\n        print(loss.item())\n") == []
    assert found(LOOP + "    if args.verbose:\n        print(loss.item())\n") == []


def test_cpu_numpy_and_tolist_of_gpu_tensors_are_flagged_once_per_chain():
    got = found(LOOP + "    preds = out.argmax(1).cpu().numpy()\n    labels = out.argmax(1).tolist()\n")
    assert got == [("script.W001", 9), ("script.W001", 10)]


def test_cpu_tensors_from_the_loader_are_not_waits():
    # y before .to(device) is a CPU tensor straight from the DataLoader
    src = LOOP.replace("    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n",
                       "    n = int(y[0])\n    first = y.sum().item()\n    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n")
    assert found(src) == []


def test_converting_or_printing_a_gpu_tensor_is_flagged():
    assert found(LOOP + "    print(loss)\n") == [("script.W002", 9)]
    assert found(LOOP + "    value = float(loss)\n") == [("script.W002", 9)]
    assert found(LOOP + '    print(f"loss {loss}")\n') == [("script.W002", 9)]
    assert found(LOOP + '    print("loss %.3f" % loss)\n') == [("script.W002", 9)]
    # the .item() is the finding, not the float() around it
    assert found(LOOP + "    value = float(loss.item())\n") == [("script.W001", 9)]


def test_a_python_branch_on_a_gpu_tensor_is_flagged_and_none_checks_are_not():
    assert found(LOOP + "    if loss < 0.01:\n        break\n") == [("script.W003", 9)]
    assert found(LOOP + "    if torch.isnan(loss).any():\n        continue\n") == [("script.W003", 9)]
    assert found(LOOP + "    if out is None:\n        break\n") == []
    assert found(LOOP + "    if x.dim() == 4:\n        pass\n") == []


def test_explicit_synchronize_every_step_is_flagged():
    assert found(LOOP + "    torch.cuda.synchronize()\n") == [("script.W001", 9)]


def test_waits_in_a_helper_called_every_step_are_found_in_the_helper():
    src = "def accuracy(out, y):\n    return (out.argmax(1) == y).float().mean().item()\n\n" + LOOP + \
        "    acc = accuracy(out, y)\n"
    assert found(src) == [("script.W001", 2)]


def test_the_loop_can_train_through_a_step_function():
    src = """\
    def train_step(x, y):
        out = model(x.to(device, non_blocking=True))
        loss = criterion(out, y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
        return loss.item()

    loader = DataLoader(ds, num_workers=args.workers, pin_memory=True, persistent_workers=True)
    for x, y in loader:
        train_step(x, y)
    """
    assert found(src) == [("script.W001", 6)]


TRAIN_FN = """\
def train(loader):
    for x, y in loader:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()

"""


def test_an_epoch_loop_is_not_a_training_loop():
    src = TRAIN_FN + "for epoch in range(10):\n    train(train_loader)\n    print('epoch', loss.item())\n"
    assert "script.W001" not in ids(src)


def test_cpu_only_scripts_get_no_host_wait_findings():
    src = """\
    import torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        print(loss.item())
    """
    assert found(src, head=False) == []


# ---------------------------------------------------------------- copies and DataLoader (W004, W005, I001-I003)


def test_blocking_copies_are_flagged_only_when_the_loader_pins_memory():
    blocking = LOOP.replace("x.to(device, non_blocking=True), y.to(device, non_blocking=True)", "x.to(device), y.cuda()")
    assert found(blocking) == [("script.W004", 3), ("script.W004", 3)]
    unpinned = blocking.replace("pin_memory=True", "pin_memory=False")
    assert "script.W004" not in ids(unpinned)
    # tensors made on the host in the loop are not pinned: non_blocking would not help them
    fresh = LOOP + "    w = torch.tensor(weights).to(device)\n    m = x.float().to(device)\n"
    assert found(fresh) == []


def test_a_pinning_dict_passed_as_kwargs_counts_as_pinning():
    src = LOOP.replace("x.to(device, non_blocking=True), y.to(device, non_blocking=True)", "x.to(device), y.to(device)")
    src = src.replace("num_workers=args.workers, pin_memory=True, persistent_workers=True", "**kwargs")
    src = "kwargs = {'num_workers': 1, 'pin_memory': True}\n" + src
    # the dict is read like the arguments written out: its literal worker count is I003 (issue 31)
    assert [i for i, _ in found(src)] == ["script.I003", "script.W004", "script.W004"]


def test_dataloader_without_workers_and_pinning_on_a_cuda_path():
    src = LOOP.replace("num_workers=args.workers, pin_memory=True, persistent_workers=True", "shuffle=True")
    assert sorted(found(src)) == [("script.I001", 1), ("script.W005", 1)]


def test_in_memory_tensor_datasets_and_unknown_kwargs_are_not_judged():
    src = LOOP.replace("DataLoader(ds, batch_size=32, num_workers=args.workers, pin_memory=True, persistent_workers=True)",
                       "DataLoader(TensorDataset(X, Y), batch_size=32)")
    assert ids(src) == set()
    assert ids(LOOP.replace("num_workers=args.workers, pin_memory=True, persistent_workers=True", "**cfg.loader_kwargs()")) == set()


def test_only_the_loader_the_training_loop_iterates_is_judged():
    src = "val_loader = DataLoader(val_ds, batch_size=64)\n" + LOOP
    assert found(src) == []


def test_the_loader_is_followed_through_a_function_parameter():
    src = TRAIN_FN + "train_loader = DataLoader(ds, batch_size=8)\nfor epoch in range(args.epochs):\n    train(train_loader)\n"
    assert sorted(found(src)) == [("script.I001", 7), ("script.W005", 7)]


def test_workers_restarting_every_epoch_and_hard_coded_values():
    src = """\
    loader = DataLoader(ds, num_workers=8, pin_memory=True)
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()
            optimizer.step()
    """
    assert sorted(found(src)) == [("script.I002", 1), ("script.I003", 1)]
    # two epochs are not "many"
    assert ids(src.replace("range(args.epochs)", "range(2)")) == {"script.I003"}


# ---------------------------------------------------------------- DDP, AMP (W006-W009)


def test_data_parallel_is_flagged_but_ddp_and_isinstance_are_not():
    assert found("model = nn.DataParallel(model)\n") == [("script.W006", 1)]
    assert found("from torch.nn import DataParallel as DP\nm = DP(model)\n") == [("script.W006", 2)]
    assert found("from torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(model)\n"
                 "ok = isinstance(m, nn.DataParallel)\n") == []


def test_deprecated_amp_spellings_wherever_they_are_used():
    src = """\
    from torch.cuda.amp import autocast
    from torch.cuda import amp
    scaler = torch.cuda.amp.GradScaler()
    with autocast():
        pass
    ctx = amp.autocast
    @torch.cuda.amp.custom_fwd
    def f(x):
        return x
    ok = torch.amp.autocast("cuda")
    flavours = (torch.cuda.amp.autocast, torch.cpu.amp.autocast)
    legacy = fn is torch.cuda.amp.autocast
    """
    # the import line as well as each use
    assert found(src) == [("script.W007", 1), ("script.W007", 3), ("script.W007", 4), ("script.W007", 6), ("script.W007", 7)]


def test_fp16_autocast_without_a_scaler_and_a_scaler_with_bf16():
    fp16 = LOOP.replace("    out = model(x)\n    loss = criterion(out, y)\n",
                        '    with torch.autocast("cuda"):\n        out = model(x)\n        loss = criterion(out, y)\n')
    assert found(fp16) == [("script.W008", 4)]
    bf16 = fp16.replace('torch.autocast("cuda")', 'torch.autocast("cuda", dtype=torch.bfloat16)')
    assert found(bf16) == []
    scaled = "scaler = torch.amp.GradScaler('cuda')\n" + bf16
    assert found(scaled) == [("script.W009", 1)]
    assert found(scaled.replace("GradScaler('cuda')", "GradScaler('cuda', enabled=False)")) == []
    # an fp16 autocast with a scaler is the right thing
    assert found("scaler = torch.amp.GradScaler('cuda')\n" + fp16) == []


# ---------------------------------------------------------------- accumulation and the schedule (W010, W011)

ACCUM = """\
accumulation_steps = 4
loader = DataLoader(ds, num_workers=args.workers, pin_memory=True, persistent_workers=True)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=len(loader) * epochs)
for i, (x, y) in enumerate(loader):
    out = model(x.to(device, non_blocking=True))
    loss = criterion(out, y.to(device, non_blocking=True))
    loss = loss / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
"""


def test_the_articles_accumulation_and_onecycle_examples_combined():
    # issue 15: sized in micro-batches, stepped with the optimizer: never reaches its annealing phase
    assert found(ACCUM) == [("script.W011", 3)]
    right = ACCUM.replace("total_steps=len(loader) * epochs", "total_steps=len(loader) // accumulation_steps * epochs")
    assert found(right) == []
    # sized in optimizer steps but stepped every micro-batch
    every_batch = right.replace("        scheduler.step()\n", "") + "    scheduler.step()\n"
    assert found(every_batch) == [("script.W011", 3)]


def test_the_size_is_followed_through_one_assignment():
    src = ACCUM.replace("total_steps=len(loader) * epochs", "total_steps=total").replace(
        "scheduler =", "total = len(loader) * epochs\nscheduler =")
    assert found(src) == [("script.W011", 4)]


def test_accumulation_without_dividing_the_loss():
    undivided = ACCUM.replace("    loss = loss / accumulation_steps\n", "").replace(
        "total_steps=len(loader) * epochs", "total_steps=len(loader) // accumulation_steps * epochs")
    assert found(undivided) == [("script.W010", 7)]
    scaled = undivided.replace("    loss.backward()\n", "    (loss / accumulation_steps).backward()\n")
    assert found(scaled) == []


# ---------------------------------------------------------------- profilers and cuDNN (I004-I006)


def test_legacy_profiler_and_nvprof_advice():
    assert found("with torch.autograd.profiler.profile(use_cuda=True) as prof:\n    pass\n" + LOOP) == [("script.I004", 1)]
    assert found("with torch.autograd.profiler.profile(use_cuda=True) as prof:\n    pass\n") == []
    assert found("# run under nvprof to see the kernels\n" + LOOP) == [("script.I005", 1)]
    assert found("# run under nvprof to see the kernels\n") == []  # not a training script
    assert found("with torch.profiler.profile() as prof:\n    pass\n") == []


def test_cudnn_benchmark_for_convolutional_models_only():
    conv = LOOP.replace("nn.Linear(8, 2)", "nn.Conv2d(3, 8, 3)")
    src = HEAD.replace("nn.Linear(8, 2)", "nn.Conv2d(3, 8, 3)") + LOOP
    assert [i for i, _ in found(src, head=False)] == ["script.I006"]
    assert found(conv) == []  # HEAD's model is linear; the replace in LOOP changes nothing
    with_flag = src + "torch.backends.cudnn.benchmark = True\n"
    assert found(with_flag, head=False) == []


# ---------------------------------------------------------------- silencing, crashes, robustness


def test_noqa_silences_a_line_or_listed_ids_only():
    assert found(LOOP + "    total = loss.item()  # noqa\n") == []
    assert found(LOOP + "    total = loss.item()  # noqa: script.W001\n") == []
    assert found(LOOP + "    total = loss.item()  # noqa: script.W002\n") == [("script.W001", 9)]
    res = lint_text(HEAD + LOOP + "    total = loss.item()\n", "t.py", ignore=["script.W001"])
    assert res.findings == [] and res.suppressed == 1


def test_a_rule_that_raises_becomes_a_finding_not_a_traceback(monkeypatch):
    def broken(script):
        raise KeyError("boom")
        yield  # unreachable: a generator like the others

    text = HEAD + LOOP
    import ast

    got = run_checks(Script(ast.parse(text), text, "t.py"), (broken,))
    assert [f.id for f in got] == ["script.E001"] and "broken: KeyError" in got[0].finding.message


def test_syntax_errors_and_null_bytes_are_one_line_errors():
    assert lint_text("def f(:\n", "bad.py").error.line_text().startswith("bad.py:1:")
    assert "not valid Python" in lint_text(b"x = 1\x00\n", "nul.py").error.message


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    res = lint_text(text, "fuzz.py")
    assert all(f.id != "script.E001" for f in res.findings)


PIECES = st.sampled_from([
    "import torch\n", "for x, y in loader:\n", "    loss.backward()\n", "    optimizer.step()\n",
    "    print(loss.item())\n", "    if loss < 1:\n", "        break\n", "while True:\n", "    x = x.to(device)\n",
    "def f(a):\n", "    return f(a)\n", "    f(x)\n", "scaler = torch.cuda.amp.GradScaler()\n",
    "loader = DataLoader(ds)\n", "    if (i + 1) % n == 0:\n", "        scheduler.step()\n", "    pass\n",
    "class M(nn.Module):\n", "    def forward(self, x):\n", "        return x.sum().item()\n",
    # issue 22: wrappers, early exits, dict loaders, argparse defaults, DDP accumulation
    "    loss_scaler(loss, optimizer, update_grad=(i + 1) % n == 0)\n", "    if not should_log:\n",
    "        continue\n", "        return\n", "        sys.exit(1)\n", "loaders = {p: DataLoader(ds) for p in s}\n",
    "for x in loaders[p]:\n", "model = DDP(model)\n", "parser.add_argument('--workers', default=0)\n",
    "loader = DataLoader(ds, num_workers=args.workers)\n", "class S(M):\n", "    def run_step(self):\n",
    "        self.run_step()\n", "        S.run_step()\n", "    print('%f' % (*t,))\n", "    n = sum(d.values())\n",
    "    g = clip_grad_norm_(ps, 1.0)\n", "from torch.cuda.amp import GradScaler\n",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=25))
def test_scripts_made_of_training_pieces_never_crash_a_rule(pieces):
    res = lint_text("".join(pieces), "pieces.py")
    assert all(f.id != "script.E001" for f in res.findings), [f.finding.message for f in res.findings]


