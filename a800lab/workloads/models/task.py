"""Your own model as a task (a model factory and its batches), checked before anything is
measured.

    task = custom_task(make_model, make_batch, loss_fn=None)   # the TrainingExplorer contract
    check_task(task, device="cpu")   # a dry run: ValueError naming the step that failed
"""

import inspect
from collections.abc import Callable

import torch
from torch import nn

from ...core.sweep import first_line
from .presets import Task, argmax_accuracy, cross_entropy

CUSTOM = "custom"


def _extras(fn, **available) -> dict:
    """The keyword arguments among `available` that `fn` accepts by name."""
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in available.items() if k in names}


def custom_task(make_model: Callable[[], nn.Module], make_batch: Callable, loss_fn=None,
                accuracy_fn=None, *, name: str = CUSTOM) -> Task:
    """A Task from your functions: make_model() -> nn.Module; make_batch(batch_size) ->
    (inputs, targets), given `device=` and/or `generator=` if it takes them; loss_fn(outputs,
    targets) -> scalar (default cross-entropy); accuracy_fn (default: label_accuracy)."""
    for what, fn in (("make_model", make_model), ("make_batch", make_batch)):
        if not callable(fn):
            raise ValueError(f"{what} must be a function, got {fn!r}")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function of (outputs, targets), got {loss_fn!r}")

    def batch(batch_size: int, generator: torch.Generator):
        device = generator.device
        made = make_batch(batch_size, **_extras(make_batch, device=device, generator=generator))
        if isinstance(made, (tuple, list)) and len(made) == 2:  # else check_batch says why not
            return _to(made, device)
        return made

    return Task(name, make_model, batch, loss_fn or cross_entropy, accuracy_fn or label_accuracy,
                f"your model ({getattr(make_model, '__name__', 'make_model')})")


def label_accuracy(outputs, targets):
    """Argmax accuracy when `targets` are class labels of `outputs`, else None."""
    if not (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    labels = not (targets.is_floating_point() or targets.is_complex()
                  or targets.dtype == torch.bool)
    if not labels or outputs.dim() != targets.dim() + 1 or outputs.shape[:-1] != targets.shape:
        return None
    return argmax_accuracy(outputs, targets)


def _to(part, device):
    if isinstance(part, torch.Tensor):
        return part.to(device)
    if isinstance(part, (tuple, list)):
        return tuple(_to(p, device) for p in part)
    return part


def check_batch(made, batch_size: int) -> tuple:
    """(inputs, targets) of make_batch, each first dimension the batch size; else ValueError."""
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise ValueError(f"make_batch({batch_size}) must return (inputs, targets), got "
                         f"{type(made).__name__}")
    inputs, targets = made
    parts = [("inputs", inputs), ("targets", targets)]
    if isinstance(inputs, (tuple, list)):
        parts = [(f"inputs[{i}]", t) for i, t in enumerate(inputs)] + [("targets", targets)]
    for what, t in parts:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"make_batch({batch_size}) returned {what} of type "
                             f"{type(t).__name__}; return tensors")
        if t.dim() == 0 or t.shape[0] != batch_size:
            raise ValueError(f"make_batch({batch_size}) returned {what} of shape "
                             f"{tuple(t.shape)}: the first dimension must be the batch size "
                             f"{batch_size}")
    return inputs, targets


def _raising(prefix: str, fn, *args):
    """fn(*args); whatever it raises, as one ValueError line "{prefix} {type}: {message}"."""
    try:
        return fn(*args)
    except Exception as exc:
        raise ValueError(f"{prefix} {type(exc).__name__}: {first_line(exc)}") from None


def _loss_fault(outputs, batch_size: int, exc: Exception) -> str:
    """Why loss_fn raised: the model's output not following the batch when it does not (the
    real fault: cross-entropy only notices it), else loss_fn itself."""
    said = f"loss_fn(outputs, targets) raised {type(exc).__name__}: {first_line(exc)}"
    if isinstance(outputs, torch.Tensor) and (outputs.dim() == 0 or outputs.shape[0] != batch_size):
        return (f"the model's output for a batch of {batch_size} has shape "
                f"{tuple(outputs.shape)}: its first dimension must be the batch size "
                f"{batch_size} ({said})")
    return said


def built_model(make_model: Callable[[], nn.Module]) -> nn.Module:
    """make_model()'s model; ValueError when it raises or returns no torch.nn.Module."""
    model = _raising("make_model() raised", make_model)
    if not isinstance(model, nn.Module):
        raise ValueError(f"make_model() must return a torch.nn.Module, got {type(model).__name__}")
    return model


def check_task(task: Task, device: str = "cpu", batch_size: int = 2) -> None:
    """A dry run (model, batch, forward, loss, backward): ValueError naming the step that fails."""
    model = built_model(task.make_model)
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no parameters that require gradients: nothing to train")
    model.to(device)
    generator = torch.Generator(device).manual_seed(0)
    made = _raising(f"make_batch({batch_size}) raised", task.make_batch, batch_size, generator)
    inputs, targets = check_batch(made, batch_size)
    outputs = _raising(f"the model raised on a batch of {batch_size} from make_batch:",
                       call_model, model, inputs)
    try:
        loss = task.loss_fn(outputs, targets)
    except Exception as exc:
        raise ValueError(_loss_fault(outputs, batch_size, exc)) from None
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        raise ValueError("loss_fn must return a scalar tensor that depends on the model's "
                         f"parameters, got {loss!r:.80}")
    loss.backward()


def batch_norm_layers(model: nn.Module) -> int:
    """How many batch-norm layers `model` has (with accumulation, each normalises over its
    micro-batch alone: k micro-batches of b train differently from one batch of k*b)."""
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def call_model(model: nn.Module, inputs):
    return model(*inputs) if isinstance(inputs, tuple) else model(inputs)
