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
from debtorch.lint.api import lint_paths

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
