"""debtorch lint on the patterns of issue 22, each on a minimal script: training steps behind wrappers,
early exits and once-only branches, tensors it must infer, dict-held loaders and argparse defaults,
accumulation under DDP (W012), and the wording of the fixes. The same patterns in real scripts:
tests/test_lint_corpus.py (REAL_CASES)."""

import textwrap

from test_lint_rules import HEAD, LOOP, found

from debtorch.findings import catalogue
from debtorch.lint.api import lint_text

# ---------------------------------------------------------------- training steps behind a wrapper or a method


def test_a_loss_scaler_given_the_loss_and_the_optimizer_is_a_training_step():
    src = """\
    for x, y in loader:
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss_value = loss.item()
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
        torch.cuda.synchronize()
    """
    assert found(src) == [("script.W001", 3), ("script.W001", 5)]
    # a call that only logs or saves them does not train
    assert found(src.replace("loss_scaler(", "log_metrics(")) == []


def test_a_step_method_is_found_in_subclasses_bases_and_through_the_class_name():
    src = """\
    class TrainerBase:
        def train(self, loader):
            for batch in loader:
                self.run_step(batch)

        def run_step(self, batch):
            raise NotImplementedError

    class SimpleTrainer(TrainerBase):
        def run_step(self, batch):
            loss = model(batch.to(device)).sum()
            loss.backward()
            self.write(loss)
            optimizer.step()

        def write(self, loss):
            SimpleTrainer.write_metrics(loss)

        @staticmethod
        def write_metrics(loss):
            value = loss.detach().cpu().item()

    class AMPTrainer(SimpleTrainer):
        def run_step(self, batch):
            loss = model(batch.to(device)).sum()
            scaler.scale(loss).backward()
            self.write(loss)
            scaler.step(optimizer)
    """
    assert found(src) == [("script.W001", 21)]


# ---------------------------------------------------------------- early exits and once-only branches


def test_code_after_an_early_exit_on_non_logging_steps_is_occasional():
    assert found(LOOP + "    if not should_log:\n        continue\n    print(loss.item())\n") == []
    assert found(LOOP + "    if step % 10 != 0:\n        continue\n    print(loss.item())\n") == []
    assert found(LOOP + "    with ctx:\n        if step % 10:\n            continue\n        a = loss.item()\n"
                        "    b = loss.item()\n") == []
    # an exit that skips a few steps leaves the others per step
    assert found(LOOP + "    if step < 10:\n        continue\n    print(loss.item())\n") == [("script.W001", 11)]
    # a continue in a nested loop does not leave the training step
    assert found(LOOP + "    for m in meters:\n        if not should_log:\n            continue\n"
                        "    t = loss.item()\n") == [("script.W001", 12)]


def test_a_return_before_logging_in_a_step_function():
    src = "def log(loss, step):\n    if not should_log(step):\n        return\n    print(loss.item())\n\n" + LOOP \
        + "    log(loss, step)\n"
    assert found(src) == []
    assert found(src.replace("not should_log(step)", "step < 10")) == [("script.W001", 4)]


def test_a_branch_that_ends_the_run_is_not_per_step_but_its_test_is():
    src = LOOP + "    if not torch.isfinite(loss):\n        print(loss.item())\n        sys.exit(1)\n"
    assert found(src) == [("script.W003", 9)]
    assert found(LOOP + "    if step > 5:\n        raise ValueError(loss.item())\n") == []
    assert found(LOOP + "    if step > 5:\n        print(loss.item())\n") == []  # a step counter: occasional anyway
    assert found(LOOP + "    if flag:\n        print(loss.item())\n") == [("script.W001", 10)]


# ---------------------------------------------------------------- tensors it infers


def test_the_norm_clip_grad_norm_returns_is_a_gpu_tensor():
    src = LOOP + "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    print(f'norm {norm:.3f}')\n"
    assert found(src) == [("script.W002", 10)]


def test_a_sum_of_the_models_loss_dict_is_a_gpu_tensor():
    src = """\
    for images, targets in loader:
        loss_dict = model(images.to(device), targets)
        losses = sum(loss_dict.values())
        assert torch.isfinite(losses).all()
        total = sum(loss for loss in loss_dict.values())
        print(total)
        losses.backward()
        optimizer.step()
    """
    assert found(src) == [("script.W003", 4), ("script.W002", 6)]
    # parameter groups are dicts of settings, not tensors
    assert found(LOOP + "    for group in optimizer.param_groups:\n        if group['lr'] > 0:\n            pass\n") == []


def test_a_tensor_unpacked_into_a_percent_format():
    src = LOOP + "    mloss = out.mean(0)\n    s = ('%10s' * 2 + '%10.4g' * 3) % (step, 'gpu', *mloss)\n"
    assert found(src) == [("script.W002", 10)]


# ---------------------------------------------------------------- loaders held in a dict, argparse defaults


TRAIN_PHASES = """\
for epoch in range(2):
    for phase in ["train", "val"]:
        for x, y in loaders[phase]:
            loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            if phase == "train":
                loss.backward()
                optimizer.step()
"""


def test_loaders_held_in_a_dict_are_judged():
    comp = "loaders = {p: DataLoader(sets[p], batch_size=8) for p in ['train', 'val']}\n" + TRAIN_PHASES
    assert sorted(found(comp)) == [("script.I001", 1), ("script.W005", 1)]
    literal = "loaders = {'train': DataLoader(ds, num_workers=4, pin_memory=True),\n" \
              "           'val': DataLoader(vs, batch_size=8)}\n" + TRAIN_PHASES
    assert found(literal) == [("script.I003", 1)]  # the training loader only
    assigned = "loaders = {}\nloaders['train'] = DataLoader(ds)\n" + TRAIN_PHASES.replace("loaders[phase]",
                                                                                           "loaders['train']")
    assert sorted(found(assigned)) == [("script.I001", 2), ("script.W005", 2)]


def test_num_workers_from_an_argparse_default_of_zero_is_no_workers():
    src = "parser.add_argument('-j', '--workers', default=0, type=int)\n" + LOOP
    res = lint_text(HEAD + src, "train.py")
    assert [(f.id, f.line) for f in res.findings] == [("script.W005", 9)]
    assert "num_workers=args.workers, 0 by default" in res.findings[0].finding.message
    assert found(src.replace("default=0", "default=4")) == []
    assert found(src.replace("'--workers'", "'--workers', dest='nw'")) == []  # another dest: unknown


# ---------------------------------------------------------------- W012: accumulation under DDP without no_sync()


DDP_ACCUM = """\
model = DDP(model, device_ids=[rank])
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True)) / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_accumulation_under_ddp_without_no_sync():
    assert found(DDP_ACCUM) == [("script.W012", 4)]
    # fairseq's and ConvNeXt's name for N: a frequency, but of updates, not of logging
    assert found(DDP_ACCUM.replace("% 4 == 0", "% update_freq == 0")) == [("script.W012", 4)]
    res = lint_text(HEAD + DDP_ACCUM, "t.py")
    assert res.findings[0].finding.message == \
        "DDP all-reduces the gradients at every micro-batch (loss.backward()); the optimizer steps every 4 micro-batches"
    assert "no_sync()" in res.findings[0].finding.fix
    with_no_sync = DDP_ACCUM.replace("    loss.backward()\n", "    with model.no_sync():\n        loss.backward()\n")
    assert found(with_no_sync) == []
    flag = DDP_ACCUM.replace("    loss.backward()\n",
                             "    model.require_backward_grad_sync = (i + 1) % 4 == 0\n    loss.backward()\n")
    assert found(flag) == []
    assert found(DDP_ACCUM.replace("model = DDP(model, device_ids=[rank])\n", "")) == []  # no DDP
    assert found(DDP_ACCUM.replace("    if (i + 1) % 4 == 0:\n        optimizer.step()",
                                   "    if True:\n        optimizer.step()")) == []  # no accumulation


def test_accumulation_under_ddp_through_a_loss_scaler_or_a_named_count():
    scaler = """\
    model = torch.nn.parallel.DistributedDataParallel(model)
    for idx, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True)) / steps
        norm = loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=(idx + 1) % steps == 0)
    """
    assert found(scaler) == [("script.W012", 4)]
    counted = """\
    model = smart_DDP(model)
    for i, (x, y) in enumerate(loader):
        ni = i + nb * epoch
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        scaler.scale(loss).backward()
        if ni - last_opt_step >= accumulate:
            scaler.step(optimizer)
            scaler.update()
            last_opt_step = ni
    """
    assert found(counted) == [("script.W012", 5)]
    # accelerate skips the sync only inside accelerator.accumulate() (issue 31): importing it is no exemption
    assert found("import accelerate\n" + textwrap.dedent(counted)) == [("script.W012", 6)]
    with_accumulate = "import accelerate\n" + textwrap.dedent(counted).replace(
        "    loss = criterion", "    with accelerator.accumulate(model):\n        pass\n    loss = criterion")
    assert found(with_accumulate) == []


# ---------------------------------------------------------------- the wording


def test_synchronize_has_its_own_fix_and_the_catalogue_keeps_one_w001():
    res = lint_text(HEAD + LOOP + "    torch.cuda.synchronize()\n    v = loss.item()\n", "t.py")
    sync, item = res.findings
    w001 = catalogue()["script.W001"]
    assert sync.id == item.id == "script.W001"
    assert sync.finding.fix == w001.variants["synchronize"]["fix"] != item.finding.fix == w001.fix
    assert "drop it" in sync.finding.fix and ".detach()" not in sync.finding.fix


def test_fixes_say_what_cfg_is_and_messages_are_not_cut_mid_expression():
    for rule in catalogue().values():
        if rule.id.startswith("script.") and "cfg." in rule.fix:
            assert 'cfg = debtorch.load("debtorch.toml")' in rule.fix, rule.id
    long = "model = torch.nn.DataParallel(model, device_ids=[0, 1, 2, 3], output_device=0, dim=0)\n"
    (f,) = lint_text(HEAD + long, "t.py").findings
    assert f.finding.message.startswith("torch.nn.DataParallel(...): DataParallel is slower")
    fmt = lint_text(HEAD + LOOP + "    s = ('%10s' * 2 + '%10.4g' * 3) % (step, 'gpu', *out.mean(0))\n", "t.py")
    assert fmt.findings[0].finding.message.startswith("('%10s' * 2 + '%10.4g' * 3) % (...) reads a GPU tensor")


def test_a_deprecated_amp_import_is_reported_at_its_line():
    src = "from torch.cuda.amp import GradScaler, autocast\nscaler = GradScaler()\n"
    res = lint_text(HEAD + src, "t.py")
    assert [(f.id, f.line - HEAD.count("\n")) for f in res.findings] == [("script.W007", 1), ("script.W007", 1),
                                                                          ("script.W007", 2)]
    assert {f.finding.message.split(" ")[0] for f in res.findings[:2]} == {"torch.cuda.amp.GradScaler",
                                                                           "torch.cuda.amp.autocast"}
