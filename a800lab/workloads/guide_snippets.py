"""The getting-started guide's code, run as printed: D.3.1's PyTorch half in this process, its
TensorFlow half, D.4.6 (gradient accumulation) and D.4.8's TensorFlow half (mixed_float16) in a
subprocess under TensorFlow's own Python (tf_harness.py, on a tiny Keras model and data it
makes). What happens is the result; an exception is quoted in one line. Without TensorFlow the
TensorFlow part says how to install it (tf_env.py).

    guide_snippets_point()   # a sweep point: {"torch": {...}, "tensorflow": "2.21.0" or None,
                             #   "results": {"D.3.1": {...}, "D.4.6": {...}, "D.4.8": {...}}}
"""

import json
import os
import subprocess
import time
from pathlib import Path

import torch

from .tf_env import tf_missing, tf_python
from .tf_harness import MARK, run

# the guide's code blocks as printed (tests compare them with docs/guide/), split where a block
# holds a PyTorch half and a TensorFlow half
D31_TORCH = '''# 检测可用 GPU 设备
import torch
print(f"可用 GPU 数量：{torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    print(f"GPU {i}: {torch.cuda.get_device_name(i)}")
    print(f"显存总量: {torch.cuda.get_device_properties(i).total_memory/1024**3:.2f}GB")
'''
D31_TF = '''# TensorFlow 自动分配 GPU 示例
import tensorflow as tf
gpus = tf.config.list_physical_devices('GPU')
if gpus:
    try:
        # 设置内存动态增长
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        # 自动选择设备
        tf.config.set_visible_devices(gpus[0], 'GPU')
    except RuntimeError as e:
        print(e)
'''
D46 = '''   # 梯度累积实现
   accumulation_steps = 4
   optimizer = tf.keras.optimizers.Adam()
   
   for batch_idx, (data, target) in enumerate(dataloader):
       with tf.GradientTape() as tape:
           output = model(data)
           loss = loss_fn(output, target)/accumulation_steps
       gradients = tape.gradient(loss, model.trainable_variables)
       if (batch_idx+1) % accumulation_steps == 0:
           optimizer.apply_gradients(zip(gradients, model.trainable_variables))
           optimizer.zero_grad()
'''  # noqa: W293 -- the blank line inside is printed with its indentation
D48_TF = '''   # TensorFlow 自动混合精度
   policy = tf.keras.mixed_precision.Policy('mixed_float16')
   tf.keras.mixed_precision.set_global_policy(policy)
'''
TF_SNIPPETS = {"D.3.1": D31_TF, "D.4.6": D46, "D.4.8": D48_TF}
HARNESS = Path(__file__).with_name("tf_harness.py")
TIMEOUT_S = 600.0


def run_torch_half() -> dict:
    """D.3.1's PyTorch half as printed: what it printed, and each GPU's bytes beside it."""
    result = run(D31_TORCH, {})  # as tf_harness runs the TensorFlow ones
    count = torch.cuda.device_count()
    return {**result, "gpus": count,
            "total_memory_bytes": [torch.cuda.get_device_properties(i).total_memory
                                   for i in range(count)]}


def run_tf_snippets(python: str, ids=tuple(TF_SNIPPETS), timeout_s: float = TIMEOUT_S) -> dict:
    """The TensorFlow snippets `ids` in a subprocess under `python`; its result, or
    {"error": why} when it could not run (its one line of stderr)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONNOUSERSITE": "1"}
    try:
        done = subprocess.run([python, str(HARNESS)], input=json.dumps(
            {sid: TF_SNIPPETS[sid] for sid in ids}), capture_output=True, text=True,
            timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"TensorFlow's snippets did not finish in {timeout_s:g} s"}
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith(MARK)), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{python} exited {done.returncode}: {last[:300]}"}
    return json.loads(line[len(MARK):])


def guide_snippets_point(snippets: str = "D.3.1 D.4.6 D.4.8", *, device: str = "cpu") -> dict:
    """A sweep point: the snippets named (space-separated ids) run as printed."""
    ids = snippets.split()
    unknown = [s for s in ids if s not in TF_SNIPPETS]
    if unknown:
        raise ValueError(f"snippets {unknown}: use ids among {list(TF_SNIPPETS)}")
    start = time.perf_counter()
    result = {"torch": run_torch_half() if "D.3.1" in ids else None, "tensorflow": None,
              "tf_missing": tf_missing(), "results": {}}
    python = tf_python()
    if python:
        ran = run_tf_snippets(python, ids)
        result.update(tensorflow=ran.get("tensorflow"), keras=ran.get("keras"),
                      results=ran.get("snippets", {}), tf_error=ran.get("error", ""))
    return {**result, "throughput": 1.0 / (time.perf_counter() - start),
            "throughput_unit": "runs/s", "device_seen": device}
