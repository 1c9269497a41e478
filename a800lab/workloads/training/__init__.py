"""The training lab (chapters 04-06, 12): one training step, measured honestly.

    from a800lab.workloads.training import Trainer, TrainSpec, train_point, custom_task
    point = train_point(model="mlp", batch_size=32, device="cpu")   # samples/s, memory, loss

Every name below is importable from here (each module is imported when a name of it is first
used):

    spec.py          TrainSpec (model, batch, accumulation, precision, optimizer, checkpointing),
                     canonical_precision, check_precision, matmul_precision_of, precisions_for
    models.py        the presets (MLP, Transformer, CNN on generated data): preset, Task,
                     describe_sizes, default_size
    task.py          your own model as a Task (make_model, make_batch, loss_fn), checked:
                     custom_task, check_task
    trainer.py       Trainer: autocast, GradScaler, accumulation; accumulation_gaps (the lab's
                     loop and the guide's snippet against one large batch), measure_step_memory
    memory.py        where a step's memory goes (counted), and the memory model fitted to probes
    point.py         train_point: the sweep point (samples/s, memory breakdown, loss curve);
                     accumulation_point, fit_from_probes
    numerics.py      held_out_point (held-out loss per precision, TF32 engaged?), embedding_point
                     (embeddings in fp16 vs fp32)
    max_batch.py     the largest micro-batch that fits (grow, bisect, verify): find_max_batch,
                     find_max_batch_for, plan_effective_batch
    loss_scaling.py  fp16's range: gradient_sample, fp16_fractions, regression_task,
                     compare_scaling (GradScaler dynamics), autocast_dtypes, norm_overflow
    levers.py        compile mode, optimizer implementation, SDPA back end, channels_last:
                     lever_unavailable, optimizer_flags
    mfu.py           count_model_flops (FlopCounterMode), mfu_figures (against the datasheet and
                     the measured peak)
    profile.py       profile_step: torch.profiler over a few steps, headlines, the trace file
    trace.py         analyse_trace: the profiler's Chrome trace read (device time by category,
                     launch gaps)
    tune.py          tune_train: successive halving over the whole training config, verified
    candidates.py    TuneSession: a tuning run's bounds, grid, verification and timed trials
    snippet.py       training_snippet: the tuned config as plain-torch code to paste
"""

from ...core.face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "spec": "TrainSpec canonical_precision check_precision matmul_precision_of precisions_for",
    "models": "Task default_size describe_sizes preset",
    "task": "check_task custom_task",
    "trainer": "Trainer accumulation_gaps measure_step_memory",
    "point": "accumulation_point fit_from_probes train_point",
    "numerics": "embedding_point held_out_point",
    "max_batch": "find_max_batch find_max_batch_for plan_effective_batch",
    "loss_scaling": "autocast_dtypes compare_scaling fp16_fractions gradient_sample "
                    "norm_overflow regression_task",
    "levers": "lever_unavailable optimizer_flags",
    "mfu": "count_model_flops mfu_figures",
    "profile": "profile_step",
    "trace": "analyse_trace",
    "tune": "tune_train",
    "snippet": "training_snippet",
})
