"""The training lab (chapters 04-06): one training step, measured honestly.

    spec.py          TrainSpec: model, batch, accumulation, precision, optimizer, checkpointing
    models.py        the presets (MLP, Transformer, CNN on generated data) and Task
    task.py          your own model as a Task (make_model, make_batch, loss_fn), checked
    trainer.py       Trainer: autocast, GradScaler, accumulation; accumulation_gaps (the lab's
                     loop and the guide's snippet against one large batch)
    memory.py        where a step's memory goes (counted), and the memory model fitted to probes
    point.py         train_point: the sweep point (samples/s, memory breakdown, loss curve)
    numerics.py      held-out loss per precision (TF32 engaged?), embeddings in fp16 vs fp32
    max_batch.py     the largest micro-batch that fits (grow, bisect, verify)
    loss_scaling.py  fp16's range: gradient histograms, GradScaler dynamics, fp32-kept layers
    levers.py        compile mode, optimizer implementation, SDPA back end, channels_last
    mfu.py           model FLOPs (FlopCounterMode) and MFU against the datasheet and measured peak
    profile.py       profile_step: torch.profiler over a few steps, headlines, the trace file
    trace.py         the profiler's Chrome trace read: device time by category, launch gaps
    tune.py          tune_train: successive halving over the whole training config, verified
    candidates.py    TuneSession: a tuning run's bounds, grid, verification and timed trials
    snippet.py       the tuned config as plain-torch code to paste
"""
