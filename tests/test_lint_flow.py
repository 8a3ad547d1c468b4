"""debtorch lint following the code as written (issue 31), each pattern on a minimal script: loaders
through ``**kwargs`` dicts, parameters, generator wrappers and ``iter()``/``next()``; training loops by
their effect (nested loops, a loop over optimizers, a step function run through a wrapper); conditions
by what they gate (accumulation boundary, logging interval through a variable, epoch end, once-only);
exemptions that hold only where their condition does; and one level into the project."""

import json
import textwrap
from pathlib import Path

from clitools import cli_runner
from test_lint_rules import HEAD, found

from debtorch.cli import app
from debtorch.lint.api import lint_paths, lint_text

# ---------------------------------------------------------------- loaders followed through the data flow

KW_LOOP = """\
loader = DataLoader(ds, batch_size=32, **loader_args)
for x, y in loader:
    loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_dict_literal_feeding_kwargs_is_read_like_the_arguments_written_out():
    src = "loader_args = {'num_workers': 0, 'pin_memory': True}\n" + KW_LOOP
    assert found(src) == [("script.W005", 2)]
    src = "loader_args = dict(num_workers=8, pin_memory=True)\n" + KW_LOOP
    assert sorted(found(src)) == [("script.I003", 2)]
    src = "loader_args = dict(shuffle=True)\nloader_args.update(extra)\n" + KW_LOOP
    assert found(src) == []  # changed after it was made: not known, not judged


def test_a_dict_of_kwargs_built_up_key_by_key_is_followed():
    src = "loader_args = {'batch_size': 8}\nloader_args['num_workers'] = 0\nloader_args['pin_memory'] = True\n" + KW_LOOP
    assert found(src) == [("script.W005", 4)]


GEN_WRAPPER = """\
def forever(loader):
    while True:
        for batch in loader:
            yield batch

def train(model, train_loader, steps):
    batches = forever(train_loader)
    for step in range(steps):
        x, y = next(batches)
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

loader = DataLoader(ds, batch_size=32, num_workers=0, pin_memory=True)
train(model, loader, 1000)
"""


def test_a_loader_is_followed_through_a_parameter_and_a_generator_that_re_yields_it():
    assert found(GEN_WRAPPER) == [("script.W005", 15)]


def test_a_loader_is_followed_through_iter_and_next():
    src = """\
    loader = DataLoader(ds, batch_size=32, pin_memory=True)
    it = iter(loader)
    for step in range(1000):
        x, y = next(it)
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
    assert found(src) == [("script.W005", 1)]


# ---------------------------------------------------------------- training loops by their effect

def test_backward_in_an_inner_accumulation_loop_and_steps_in_a_loop_over_optimizers():
    src = """\
    for step in range(1000):
        for micro in range(accum):
            x, y = next(batches)
            loss = criterion(model(x.to(device)), y.to(device)) / accum
            loss.backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        total = loss.item()
    """
    assert found(src) == [("script.W001", 9)]


def test_a_step_function_defined_in_the_loop_and_run_through_a_wrapper_is_the_training_step():
    src = """\
    for x, y in batches:
        def compute_loss():
            return criterion(model(x.to(device)), y.to(device))

        def train_step():
            loss = compute_loss()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss.item()

        value = timed(train_step)
    """
    assert found(src) == [("script.W001", 10)]


def test_an_epoch_loop_around_a_complete_training_loop_is_still_not_per_step():
    src = """\
    for epoch in range(100):
        for x, y in batches:
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        print(loss.item())
    """
    assert found(src) == []


# ---------------------------------------------------------------- conditions by what they gate

ACCUM = """\
for step, (x, y) in enumerate(batches):
    loss = criterion(model(x.to(device)), y.to(device)) / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
        print(loss.item())
"""


def test_the_accumulation_boundary_runs_every_optimizer_step_and_is_not_a_logging_interval():
    assert found(ACCUM) == [("script.W001", 7)]
    logging = ACCUM.replace("        print(loss.item())\n", "    if step % log_every == 0:\n        print(loss.item())\n")
    assert found(logging) == []


def test_a_condition_through_a_variable_is_judged_by_what_it_was_assigned():
    src = """\
    for step, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        flag = step % 100 == 0
        if flag:
            print(loss.item())
    """
    assert found(src) == []
    every = src.replace("flag = step % 100 == 0", "flag = loss.requires_grad")
    assert found(every) == [("script.W001", 7)]


def test_epoch_end_and_once_only_branches_are_occasional():
    src = """\
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if i == len(batches) - 1:
            print(loss.item())
        if i == 0:
            first = loss.item()
    """
    assert found(src) == []


# ---------------------------------------------------------------- exemptions stated as conditions

ACCELERATE = """\
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, batch in enumerate(loader):
    loss = model(**batch).loss / accum
    accelerator.backward(loss)
    if (step + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_accelerate_exempts_accumulation_only_with_accumulate_or_no_sync():
    assert found(ACCELERATE) == [("script.W012", 6)]
    with_accumulate = ACCELERATE.replace("    loss = model(**batch).loss / accum\n    accelerator.backward(loss)\n",
                                         "    with accelerator.accumulate(model):\n"
                                         "        loss = model(**batch).loss / accum\n        accelerator.backward(loss)\n")
    assert found(with_accumulate) == []


def test_a_text_pipeline_exempts_only_the_loaders_it_feeds():
    image = """\
    from transformers import AutoModelForImageClassification
    from torchvision import datasets, transforms
    ds = datasets.ImageFolder(root, transform=transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()]))
    loader = DataLoader(ds, batch_size=32, num_workers=0, pin_memory=True)
    for x, y in loader:
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
    """
    assert found(image) == [("script.W005", 4)]
    text = """\
    from datasets import load_dataset
    from transformers import DataCollatorWithPadding
    raw = load_dataset("glue", "mrpc")
    tokenized = raw.map(tokenize, batched=True)
    loader = DataLoader(tokenized["train"], batch_size=32, collate_fn=DataCollatorWithPadding(tok), pin_memory=True)
    for batch in loader:
        loss = model(**{k: v.to(device, non_blocking=True) for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
    """
    assert found(text) == []


# ---------------------------------------------------------------- one level into the project

TRAIN = HEAD + textwrap.dedent("""\
    from helpers import to_host, train_step
    for x, y in batches:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        value = to_host(loss)
        print(float(value))
    """)
HELPERS = """\
def to_host(t):
    return t.detach().cpu()

def train_step(model, batch, optimizer):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    return loss
"""


def test_a_helper_of_the_same_project_is_read_for_what_it_returns(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "helpers.py").write_text(HELPERS)
    report = lint_paths([str(tmp_path / "train.py")])
    assert [(f.id, f.line) for f in report.findings] == []   # float() of a CPU tensor waits for nothing
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "train.py").write_text(TRAIN)
    report = lint_paths([str(alone / "train.py")])   # no helpers.py: to_host's result is unknown, not judged
    assert [(f.id, f.line) for f in report.findings] == []
    (alone / "helpers.py").write_text(HELPERS.replace("t.detach().cpu()", "t.detach() * 2"))
    report = lint_paths([str(alone)])
    assert [(f.id, Path(f.path).name, f.line) for f in report.findings] == [("script.W002", "train.py", 14)]


def test_a_wrapper_of_the_same_project_that_trains_makes_the_loop_a_training_loop(tmp_path):
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "steps.py").write_text(HELPERS)
    for module in ("helpers", "pkg.steps"):
        (tmp_path / "train.py").write_text(HEAD + f"from {module} import train_step\n" + textwrap.dedent("""\
            for x in batches:
                loss = train_step(model, x.to(device), optimizer)
                print(loss.item())
            """))
        r = cli_runner().invoke(app, ["lint", "--json", str(tmp_path / "train.py")])
        doc = json.loads(r.stdout)
        assert [(f["id"], f["line"]) for f in doc["findings"]] == [("script.W001", 11)], module


# ---------------------------------------------------------------- classes found in the first held-out round

def test_a_dataset_that_returns_gpu_tensors_is_not_given_workers_or_pinning():
    src = """\
    class Samples(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return data[i : i + 128].long().cuda()
        def __len__(self):
            return 1000

    loader = DataLoader(Samples(), batch_size=4)
    for x in loader:
        loss = model(x)
        loss.backward()
        optimizer.step()
    """
    assert found(src) == []
    assert sorted(found(src.replace(".long().cuda()", ".long()"))) == [("script.I001", 7), ("script.W005", 7)]


def test_a_loader_read_with_next_only_in_a_validation_branch_is_not_the_training_loader():
    src = """\
    train_loader = cycle(DataLoader(train_ds, batch_size=4, num_workers=8, pin_memory=True, persistent_workers=True))
    val_loader = cycle(DataLoader(val_ds, batch_size=4))
    for i in range(1000):
        x, y = next(train_loader)
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
        if i % 100 == 0:
            vx, vy = next(val_loader)
    """
    assert found("def cycle(dl):\n    while True:\n        yield from dl\n" + textwrap.dedent(src)) == [("script.I003", 4)]


def test_a_loss_function_imported_from_another_module_is_not_assumed_on_the_device():
    src = """\
    from mypkg.utils.loss import compute_loss
    for x, y in batches:
        loss, parts = compute_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        log(float(parts[0]))
    """
    assert found(src) == []
    assert found(src.replace("from mypkg.utils.loss import compute_loss", "import os")) == [("script.W002", 6)]


def test_micro_batches_in_an_inner_loop_under_ddp_or_accelerate_all_reduce_each_time():
    src = """\
    model = DDP(model)
    for step in range(1000):
        for _ in range(accum):
            loss = criterion(model(next(batches).to(device)), y) / accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    assert found(src) == [("script.W012", 5)]
    synced = src.replace("            loss.backward()\n", "            with model.no_sync():\n                loss.backward()\n")
    assert found(synced) == []


# ---------------------------------------------------------------- classes found in the second held-out round

CONTINUE_ACCUM = """\
model = DDP(model)
for step, (x, y) in enumerate(batches):
    loss = criterion(model(x.to(device)), y.to(device)) / accum
    loss.backward()
    if step % accum != 0:
        continue
    optimizer.step()
    optimizer.zero_grad()
    print(loss.item())
"""


def test_accumulation_written_as_an_early_continue_gates_the_optimizer_step_not_a_log():
    assert found(CONTINUE_ACCUM) == [("script.W012", 4), ("script.W001", 9)]
    # through a name that says when to step (timm: need_update = ... % accum_steps == 0)
    named = CONTINUE_ACCUM.replace("    if step % accum != 0:\n", "    need_update = (step + 1) % accum == 0\n"
                                   "    if not need_update:\n")
    assert found(named) == [("script.W012", 4), ("script.W001", 10)]
    # an early continue before logging only is still a logging interval
    logging = """\
    for step, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if step % log_every != 0:
            continue
        print(loss.item())
    """
    assert found(logging) == []


def test_a_context_of_another_module_given_the_ddp_model_may_skip_the_sync(tmp_path):
    src = HEAD + textwrap.dedent("""\
        from torch.nn.parallel import DistributedDataParallel
        from utils import ddp_sync
        ddp = DistributedDataParallel(model)
        while True:
            for r in range(rounds):
                with ddp_sync(ddp, r == rounds - 1):
                    loss = criterion(ddp(next(batches).to(device)), y)
                    loss.backward()
            optimizer.step()
        """)
    (tmp_path / "train.py").write_text(src)
    report = lint_paths([str(tmp_path / "train.py")])   # utils is not in the project: unknown, silent
    assert [f.id for f in report.findings] == []
    (tmp_path / "utils.py").write_text("import contextlib\n@contextlib.contextmanager\ndef ddp_sync(m, sync):\n"
                                       "    if sync:\n        yield\n    else:\n        with m.no_sync():\n"
                                       "            yield\n")
    assert [f.id for f in lint_paths([str(tmp_path)]).findings] == []   # read: it calls no_sync()
    (tmp_path / "utils.py").write_text("import contextlib\n@contextlib.contextmanager\ndef ddp_sync(m, sync):\n"
                                       "    yield\n")
    assert [(f.id, f.line) for f in lint_paths([str(tmp_path)]).findings] == [("script.W012", 15)]


def test_a_loss_computed_by_a_nested_function_is_where_its_returns_are():
    src = """\
    for x, y in batches:
        def train_step():
            def loss_fn(out, target):
                targets = torch.full_like(out, 1.0)
                return F.binary_cross_entropy_with_logits(out, targets * target)
            loss = loss_fn(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            return float(loss)
        value = timed(train_step)
    """
    assert found("import torch.nn.functional as F\n" + textwrap.dedent(src)) == [("script.W002", 10)]
    host = """\
    def to_host(t):
        return t.detach().cpu()
    for x, y in batches:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        print(float(to_host(loss)))
    """
    assert found(host) == [("script.W001", 2)]   # the wait is the .cpu() in to_host, not float() of its result


def test_a_logging_interval_the_code_sets_to_1_is_every_step():
    src = """\
    log_interval = 1
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if i % log_interval == 0:
            print(loss.item())
    """
    assert found(src) == [("script.W001", 7)]
    assert found(src.replace("log_interval = 1", "log_interval = 10")) == []
    option = src.replace("log_interval = 1\n", "parser.add_argument('--log-interval', type=int, default=1)\n")
    assert found(option.replace("i % log_interval", "i % args.log_interval")) == [("script.W001", 7)]


def test_tensorboard_add_scalar_of_a_gpu_tensor_waits_every_step():
    src = """\
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        writer.add_scalar("loss", loss, global_step=i)
        writer.add_scalars("parts", {"total": loss, "lr": lr}, i)
    """
    assert found(src) == [("script.W001", 5), ("script.W001", 6)]
    assert found(src.replace("        writer", "        if i % 100 == 0:\n            writer")) == []
    message = lint_text(HEAD + textwrap.dedent(src), "train.py").findings[0].finding.message
    assert message == 'writer.add_scalar("loss", loss, global_step=i) copies a GPU tensor to the host for TensorBoard every step'


def test_a_batch_wrapped_in_the_legacy_variable_is_still_the_batch():
    src = """\
    from torch.autograd import Variable
    loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True)
    it = iter(loader)
    for step in range(1000):
        images, targets = next(it)
        images = Variable(images.cuda())
        loss = criterion(model(images), targets.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
        plot(torch.Tensor([step, 0.5]).unsqueeze(0).cpu())
    """
    assert found(src) == [("script.I003", 2), ("script.W004", 6)]  # torch.Tensor([...]) is made on the host


def test_a_branch_that_initialises_a_name_on_the_first_step_runs_once_but_its_else_every_step():
    src = """\
    loss_ema = None
    for x, y in batches:
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if loss_ema is None:
            loss_ema = loss.item()
        else:
            loss_ema = 0.9 * loss_ema + 0.1 * loss.item()
    """
    assert found(src) == [("script.W001", 9)]
    interval = """\
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if i % 100 == 0:
            log(i)
        else:
            total = loss.item()
    """
    assert found(interval) == [("script.W001", 8)]


def test_a_worker_count_held_in_a_module_constant_is_fixed_in_the_code():
    src = """\
    workers = 4
    def train():
        loader = DataLoader(ds, batch_size=32, num_workers=workers, pin_memory=True, persistent_workers=True)
        for x, y in loader:
            loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
            loss.backward()
            optimizer.step()
    """
    assert found(src) == [("script.I003", 3)]
    assert found(src.replace("workers = 4", "workers = 0")) == [("script.W005", 3)]
    assert found(src.replace("workers = 4", "workers = os.cpu_count()")) == []


TRAINER_SCRIPT = HEAD + textwrap.dedent("""\
    from trainer import Trainer
    loader = DataLoader(ds, batch_size=32, num_workers=8)
    trainer = Trainer(model).cuda()
    for epoch in range(20):
        for x, y in loader:
            trainer.train_step(x.cuda(), y.cuda())
    """)


def test_a_training_step_that_is_a_method_of_another_modules_class(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER_SCRIPT)
    (tmp_path / "trainer.py").write_text("class Trainer:\n    def train_step(self, x, y):\n"
                                         "        loss = self.model(x).sum()\n        loss.backward()\n"
                                         "        self.optimizer.step()\n")
    got = [(f.id, f.line) for f in lint_paths([str(tmp_path)]).findings]
    assert got == [("script.I001", 9), ("script.I002", 9), ("script.I003", 9)]
    (tmp_path / "trainer.py").write_text("class Trainer:\n    def train_step(self, x, y):\n        return x\n")
    assert lint_paths([str(tmp_path)]).findings == []   # read, and it does not train
    (tmp_path / "trainer.py").unlink()                  # not readable: the method's name says it trains
    got = [(f.id, f.line) for f in lint_paths([str(tmp_path / "train.py")]).findings]
    assert got == [("script.I001", 9), ("script.I002", 9), ("script.I003", 9)]
    assert lint_text(TRAINER_SCRIPT.replace("train_step", "evaluate"), "train.py").findings == []


def test_a_copy_is_judged_by_the_training_loaders_pinning_not_another_loaders():
    src = """\
    loader = DataLoader(ds, batch_size=32, num_workers=4, persistent_workers=True, pin_memory=True)
    test_loader = DataLoader(test_ds, batch_size=32)
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
    """
    assert found(src) == [("script.I003", 1), ("script.W004", 4)]
    swapped = src.replace("persistent_workers=True, pin_memory=True)", "persistent_workers=True)") \
        .replace("DataLoader(test_ds, batch_size=32)", "DataLoader(test_ds, batch_size=32, pin_memory=True)")
    assert found(swapped) == [("script.I001", 1), ("script.I003", 1)]


def test_a_dataset_that_only_indexes_rows_it_holds_needs_no_workers():
    src = """\
    class Rows(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.rows = rows
        def __len__(self):
            return len(self.rows)
        def __getitem__(self, i):
            return self.rows[i]["input_ids"].type(torch.int64), self.rows[i]["labels"].long()

    loader = DataLoader(Rows(torch.load("train.pt")), batch_size=4, pin_memory=True)
    for x, y in loader:
        loss = criterion(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
    """
    assert found(src) == []
    decoding = src.replace('return self.rows[i]["input_ids"]', 'return Image.open(self.rows[i]["path"])')
    assert found(decoding) == [("script.W005", 9)]


def test_token_batches_of_a_text_pipeline_are_not_told_to_pin():
    src = """\
    tokenizer = AutoTokenizer.from_pretrained("t5-base")
    ds = TokenStream(raw, tokenizer, batch_size=8)
    loader = DataLoader(ds, batch_size=None, num_workers=args.workers)
    for batch in loader:
        loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
    """
    assert found(src) == []
    images = src.replace("TokenStream(raw, tokenizer, batch_size=8)", "ImageStream(raw, batch_size=8)")
    assert found(images) == [("script.I001", 3)]


def test_hyperparameters_are_not_the_models_parameters():
    src = """\
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        for threshold, value in model.hyperparams["lr_steps"]:
            if i > threshold:
                lr = value
    """
    assert found(src) == []


def test_a_second_update_every_k_steps_is_not_accumulation():
    src = """\
    model = DDP(model)
    for i, (x, y) in enumerate(batches):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        regularize = i % reg_every == 0
        if regularize:
            penalty = model(x.to(device)).pow(2).mean()
            penalty.backward()
            optimizer.step()
    """
    assert found(src) == []   # a GAN's lazy regulariser: every step updates, none accumulates
