"""Your model, from a file (what `--user-model` and a panel's `user_model=` take) or from your
functions, loaded and dry-run once; whatever is wrong with it is one line naming the file and the
fault (a ValueError on the command line, a panel's status line), never a traceback.

    task = load_user_task("my_model.py", "cpu", check_task)   # ValueError: "my_model.py: ..."
    task, fault = panel_task(make_model=f, make_batch=g, device="cpu", check=check_task)
"""

import importlib
import importlib.util
import inspect
import os
import traceback
from collections.abc import Callable
from pathlib import Path

from ...core.sweep import first_line
from .presets import Task
from .task import check_task, custom_task

GIVE = "give a .py file defining make_model() and make_batch(batch_size), or a module name"


def load_user_module(where: str, label: str):
    """The module of `where` (a .py file or a module name), loaded; anything that stops it
    loading is one ValueError line starting with `label` and saying what to give instead."""
    path = Path(where).expanduser()
    if path.is_dir():
        raise ValueError(f"{label} is a folder; {GIVE}")
    if not path.exists() and (path.suffix == ".py" or "/" in where or os.sep in where):
        raise ValueError(f"{label}: no such file; {GIVE}")
    if path.is_file() and path.suffix != ".py":
        raise ValueError(f"{label} is not a .py file; {GIVE}")
    try:
        if path.suffix != ".py":
            return importlib.import_module(where)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except SyntaxError as exc:
        raise ValueError(f"{label}, line {exc.lineno}: {exc.msg}; fix the file and run "
                         "again") from None
    except ModuleNotFoundError as exc:
        if where == exc.name or where.startswith(f"{exc.name}."):
            raise ValueError(f"{label}: no such file or module; {GIVE}") from None
        raise ValueError(f"{label} imports {exc.name}, which is not installed here; install "
                         "it or remove the import") from None
    except Exception as exc:  # the user's own code failed while loading: where, in one line
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
        at = (own or frames)[-1]
        raise ValueError(f"{label} failed while loading ({at.filename}, line {at.lineno}): "
                         f"{type(exc).__name__}: {first_line(exc)}") from None


def load_user_task(where: str, device: str, check: Callable = check_task, *,
                   label: str | None = None) -> Task:
    """The Task of a file or module defining make_model() and make_batch(batch_size) (and
    optionally loss_fn, accuracy_fn), dry-run by `check(task, device)`."""
    label = label or str(where)
    module = load_user_module(where, label)
    missing = [n for n in ("make_model", "make_batch") if not callable(getattr(module, n, None))]
    if missing:
        raise ValueError(f"{label} defines no {' or '.join(missing)}(): give a file with "
                         "make_model() and make_batch(batch_size)")
    task = custom_task(module.make_model, module.make_batch, getattr(module, "loss_fn", None),
                       getattr(module, "accuracy_fn", None))
    return checked(task, device, check, label)


def checked(task: Task, device: str, check: Callable, label: str) -> Task:
    """`task` once `check(task, device)` passed; its fault as one line "{label}: {fault}"."""
    try:
        check(task, device)
    except ValueError as exc:
        raise ValueError(f"{label}: {first_line(exc)}") from None
    except Exception as exc:  # a check's own step that raised something else: still one line
        raise ValueError(f"{label}: {type(exc).__name__}: {first_line(exc)}") from None
    return task


def defined_in(fn) -> str:
    """Where `fn` was written, for a message: "my_models.py", or "this notebook" for a cell."""
    try:
        source = inspect.getsourcefile(fn) or ""
    except TypeError:  # a builtin or a C function
        source = ""
    if not source or source.startswith("<") or "ipykernel" in source:
        return "this notebook"
    path = Path(source)
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def panel_task(user_model: str | None = None, make_model=None, make_batch=None, loss_fn=None,
               accuracy_fn=None, *, device: str, check: Callable = check_task
               ) -> tuple[Task | None, str]:
    """A panel's model: (None, "") for none given, (task, "") once its dry run passed, else
    (None, the fault in one line naming the file). Giving the model two ways, or make_model
    without make_batch, is a ValueError (the call is wrong, not the model)."""
    functions = make_model is not None or make_batch is not None
    if user_model is not None and functions:
        raise ValueError("give your model as user_model= (a file) or as make_model= and "
                         "make_batch=, not both")
    if functions and (make_model is None or make_batch is None):
        raise ValueError("your own model needs both make_model= and make_batch=")
    try:
        if user_model is not None:
            return load_user_task(user_model, device, check, label=f"your model ({user_model})"), ""
        if functions:
            task = custom_task(make_model, make_batch, loss_fn, accuracy_fn)
            return checked(task, device, check, f"your model ({defined_in(make_model)})"), ""
    except ValueError as exc:
        return None, str(exc)
    return None, ""
