"""The training lab (chapters 04-06, 12): one training step, measured honestly.

    from a800lab.workloads.training import Trainer, TrainSpec, train_point, custom_task
    point = train_point(model="mlp", batch_size=32, device="cpu")   # samples/s, memory, loss
"""

from ...core.face import face

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
__getattr__, __dir__, __all__ = face(__name__, _NAMES)
