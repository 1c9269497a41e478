"""What the training and serving labs share: the model presets (presets.py), your own model as
a task and its checks (task.py), the file it comes from (user_model.py), and the levers of a
model's step (levers.py: torch.compile, channels_last, SDPA back ends, optimizer kernels)."""
