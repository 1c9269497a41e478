"""The training lab (chapters 04-06, 12): one training step, measured honestly.

    from a800lab.workloads.training import Trainer, TrainSpec, train_point, custom_task
    point = train_point(model="mlp", batch_size=32, device="cpu")   # samples/s, memory, loss
"""

import importlib

_NAMES = {
    ".spec": "TrainSpec canonical_precision check_precision matmul_precision_of precisions_for",
    "..models.presets": "Task default_size describe_sizes preset",
    "..models.task": "check_task custom_task",
    "..models.user_model": "load_user_task panel_task",
    ".trainer": "Trainer accumulation_gaps measure_step_memory",
    ".point": "accumulation_point count_model_flops fit_from_probes mfu_figures train_point",
    ".numerics": "embedding_point held_out_point",
    ".max_batch": "find_max_batch find_max_batch_for plan_effective_batch",
    ".loss_scaling": "autocast_dtypes compare_scaling fp16_fractions gradient_sample "
                    "norm_overflow regression_task",
    "..models.levers": "lever_unavailable optimizer_flags",
    ".profile": "profile_step",
    ".trace": "analyse_trace",
    ".tune": "training_snippet tune_train",
}

_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str):  # PEP 562: a name's module is imported when the name is first used
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
