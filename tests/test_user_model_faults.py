"""Your model's faults wherever a model is taken (TrainingExplorer, ServingExplorer, `profile`,
`tune train`, `sweep train`, `sweep serve`, `sweep load`, `sweep concurrency`, `tune serve`,
`sweep generate`'s generator file): an import error, a syntax error,
an output that ignores the batch, make_batch's wrong batch size and a raising loss_fn each come
back as one line naming the file and the fault, with no traceback anywhere."""

import importlib.util
import textwrap

import pytest

from a800lab.cli import main

GOOD_BATCH = "return torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))"
FILES = {
    "import_error": f"""
        import torch
        import no_such_package_here
        from torch import nn

        def make_model():
            return nn.Linear(16, 4)

        def make_batch(batch_size):
            {GOOD_BATCH}
        """,
    "syntax_error": f"""
        import torch
        from torch import nn

        def make_model(:
            return nn.Linear(16, 4)

        def make_batch(batch_size):
            {GOOD_BATCH}
        """,
    "wrong_output": f"""
        import torch
        from torch import nn

        class Pooled(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(16, 4)

            def forward(self, x):
                return self.linear(x).mean(0, keepdim=True)   # ignores the batch

        def make_model():
            return Pooled()

        def make_batch(batch_size):
            {GOOD_BATCH}
        """,
    "wrong_batch": """
        import torch
        from torch import nn

        def make_model():
            return nn.Linear(16, 4)

        def make_batch(batch_size):
            return torch.randn(batch_size + 1, 16), torch.randint(0, 4, (batch_size + 1,))
        """,
    "raising_loss": f"""
        import torch
        from torch import nn

        def make_model():
            return nn.Linear(16, 4)

        def make_batch(batch_size):
            {GOOD_BATCH}

        def loss_fn(outputs, targets):
            raise RuntimeError("my loss is broken")
        """,
}
SAYS = {  # the fault as each line names it
    "import_error": "imports no_such_package_here, which is not installed here",
    "syntax_error": ", line 5: invalid syntax; fix the file",
    "wrong_output": "has shape (1, 4)",
    "wrong_batch": "returned inputs of shape (",
    "raising_loss": "loss_fn(outputs, targets) raised RuntimeError: my loss is broken",
}
LOADS = ("import_error", "syntax_error")  # the file's own faults: no functions to pass
SERVES_ANYWAY = {"raising_loss"}  # serving never calls loss_fn: no fault there


def _file(tmp_path, fault):
    path = tmp_path / f"{fault}.py"
    path.write_text(textwrap.dedent(FILES[fault]))
    return path


def _functions(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: getattr(module, k) for k in ("make_model", "make_batch", "loss_fn")
            if hasattr(module, k)}


def _one_line(text: str, *fragments: str) -> None:
    assert "\n" not in text.strip() and "Traceback" not in text, text
    for fragment in fragments:
        assert fragment in text, (fragment, text)


def _panels():
    from a800lab.widgets import ServingExplorer, TrainingExplorer

    return {
        "training": (TrainingExplorer, dict(device="cpu", cpu_threads=1, train_steps=1,
                                            budget_s=0.01),
                     lambda p: [p.run(wait=True, batch_size=[2]), p.find_max_batch(wait=True),
                                p.profile(wait=True), p.tune(wait=True, target_batch=4)]),
        "serving": (ServingExplorer, dict(device="cpu", cpu_threads=1, requests=100,
                                          budget_s=0.01),
                    lambda p: [p.run(wait=True, batch_size=[1]),
                               p.run(wait=True, view="concurrency", streams=[1])]),
    }


@pytest.mark.parametrize(("panel", "fault", "given"), [
    (panel, fault, given) for panel in ("training", "serving") for fault in FILES
    for given in ("file", "functions") if given == "file" or fault not in LOADS])
def test_every_panel_says_the_fault_in_one_line_and_refuses_every_run(
        tmp_path, capsys, monkeypatch, panel, fault, given):
    monkeypatch.chdir(tmp_path)  # the panel names the file relative to here
    path = _file(tmp_path, fault)
    cls, settings, presses = _panels()[panel]
    if given == "file":
        p = cls(user_model=str(path), **settings)
    else:
        functions = _functions(path)
        if panel == "serving":
            functions.pop("loss_fn", None)
        p = cls(**functions, **settings)
    if panel == "serving" and fault in SERVES_ANYWAY:
        assert p.status_text.startswith("Ready") and all(presses(p))
        assert set(p.results["outcome"]) == {"ok"}
        return
    fault_line = p.status_text
    _one_line(fault_line, f"your model ({path.name if given == 'functions' else path})",
              SAYS[fault])
    assert not any(presses(p))               # Run, and every other button: refused, the same
    assert p.status_text == fault_line and p.results.empty
    _one_line(capsys.readouterr().err)       # nothing printed beside the panel either


COMMANDS = {
    "profile": "profile --device cpu --steps 1 --warmup-steps 1 --batch-size 2 --out {tmp}/p",
    "tune train": "tune train --device cpu --target-batch 4 --store {tmp}/t.json",
    "sweep train": "sweep train --device cpu --batch-size 2 --train-steps 1 --budget-s 0.01 "
                   "--out {tmp}/t.jsonl",
    "sweep serve": "sweep serve --device cpu --batch-size 1 --requests 100 --budget-s 0.01 "
                   "--out {tmp}/s.jsonl",
    "sweep concurrency": "sweep concurrency --device cpu --streams 1 --requests 100 "
                         "--out {tmp}/c.jsonl",
    "tune serve": "tune serve --offline --p99-ms 1000 --device cpu --batch-size 1 --requests 100 "
                  "--budget-s 0.01",
    "sweep load": "sweep load --device cpu --rate 500 --duration-s 0.25 --out {tmp}/l.jsonl",
    # a generator's file (make_generator()): these files' other faults are its missing function
    "sweep generate": "sweep generate --device cpu --rate 50 --duration-s 0.3 --prompt-tokens "
                      "4 --output-tokens 2 --max-batch 2 --out {tmp}/g.jsonl",
}
SERVING = ("sweep serve", "sweep concurrency", "tune serve", "sweep load")


@pytest.mark.parametrize("fault", list(FILES))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_says_the_fault_in_one_line(tmp_path, capsys, command, fault):
    path = _file(tmp_path, fault)
    argv = [*COMMANDS[command].format(tmp=tmp_path).split(), "--threads", "1",
            "--user-model", str(path)]
    code = main(argv)
    err = capsys.readouterr().err
    if command in SERVING and fault in SERVES_ANYWAY:
        assert code == 0, err
        return
    says = "defines no make_generator()" if command == "sweep generate" and \
        fault not in LOADS else SAYS[fault]
    assert code == 2
    _one_line(err, f"a800lab: error: --user-model {path}", says)


def test_sweep_train_measures_your_model_file(tmp_path, capsys):
    """`sweep train --user-model` is TrainingExplorer(user_model=...)'s twin: custom points,
    its levers judged against your model, not a preset; --model beside it is refused."""
    from a800lab.core.results import read_records

    path = tmp_path / "good.py"
    path.write_text(textwrap.dedent(FILES["raising_loss"]).split("def loss_fn")[0])
    out = tmp_path / "t.jsonl"
    argv = ["sweep", "train", "--user-model", str(path), "--batch-size", "2", "4",
            "--train-steps", "1", "--budget-s", "0.01", "--device", "cpu", "--threads", "1",
            "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    assert [(r.params["model"], r.params["batch_size"], r.outcome) for r in read_records(out)] \
        == [("custom", 2, "ok"), ("custom", 4, "ok")]
    capsys.readouterr()
    assert main([*argv, "--model", "mlp"]) == 2
    _one_line(capsys.readouterr().err, "--user-model is the model: drop --model")
