"""Runs the getting-started guide's TensorFlow snippets as printed, in TensorFlow's own Python:
reads {snippet id: code} as JSON on stdin, runs each on a tiny Keras model and data made here,
and writes one JSON line of what happened to stdout. Started by guide_snippets.run_tf_snippets;
it imports nothing of the lab (TensorFlow's venv has no torch).

    python tf_harness.py < snippets.json      # -> {"tensorflow": "2.21.0", "snippets": {...}}
"""

import contextlib
import io
import json
import sys
import textwrap

import numpy as np

tf = None   # TensorFlow, imported by main(): the lab imports this module without it (its tests)
MICRO, STEPS = 8, 4          # D.4.6: 4 micro-batches of 8 (its accumulation_steps = 4)
SEEDS = (0, 1, 2)            # D.4.8: held-out loss over three seeds per policy
MARK = "A800LAB-TF-RESULT "  # the result line, apart from anything the snippets print


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def run(code: str, namespace: dict) -> dict:
    """exec the snippet (its list-item indentation removed) in `namespace`, as printed."""
    out, error = io.StringIO(), ""
    with contextlib.redirect_stdout(out):
        try:
            exec(textwrap.dedent(code), namespace)  # noqa: S102 -- the guide's code is the test
        except Exception as exc:  # noqa: BLE001 -- an exception is the finding
            error = one_line(exc)
    return {"error": error, "stdout": out.getvalue()}


def tiny_model(seed: int):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, "tanh"),
                                tf.keras.layers.Dense(1)])


def data(seed: int, n: int):
    """x ~ N(0, 1) in 16 dimensions, y a fixed smooth function of it (the same teacher always)."""
    teacher = np.random.default_rng(1234).normal(size=(16, 1)).astype("float32")
    x = np.random.default_rng(seed).normal(size=(n, 16)).astype("float32")
    return x, np.tanh(x @ teacher / 4).astype("float32")


def d31(code: str) -> dict:
    """Memory growth and visible devices: what they are after the snippet ran."""
    result = run(code, {})
    gpus = tf.config.list_physical_devices("GPU")
    return {**result, "gpus": len(gpus),
            "memory_growth": [tf.config.experimental.get_memory_growth(g) for g in gpus],
            "visible_gpus": len(tf.config.get_visible_devices("GPU"))}


def d46(code: str) -> dict:
    """The accumulation loop: the gradients it hands to apply_gradients, against one batch of
    MICRO x STEPS and against the last micro-batch's / STEPS, at the weights it started from."""
    model = tiny_model(0)
    x, y = data(1, MICRO * STEPS)
    dataloader = [(tf.constant(x[i * MICRO:(i + 1) * MICRO]),
                   tf.constant(y[i * MICRO:(i + 1) * MICRO])) for i in range(STEPS)]

    def loss_fn(output, target):   # the snippet calls loss_fn(output, target)
        return tf.reduce_mean(tf.square(output - target))

    start = [w.copy() for w in model.get_weights()]
    applied, adam = [], tf.keras.optimizers.Adam
    original = adam.apply_gradients

    def observed(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        applied.append([np.asarray(g) for g, _ in pairs])
        return original(self, pairs, *args, **kwargs)

    adam.apply_gradients = observed
    try:
        result = run(code, {"tf": tf, "model": model, "dataloader": dataloader,
                            "loss_fn": loss_fn})
    finally:
        adam.apply_gradients = original
    reference = tf.keras.models.clone_model(model)
    reference.set_weights(start)

    def gradients(xb, yb, scale: float = 1.0):
        with tf.GradientTape() as tape:
            loss = loss_fn(reference(xb), yb) * scale
        return [np.asarray(g) for g in tape.gradient(loss, reference.trainable_variables)]

    def gap(got, want) -> float:
        return max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True)) / max(
            float(np.abs(b).max()) for b in want)

    first = applied[0] if applied else None
    return {**result, "applied_steps": len(applied), "micro_batch": MICRO, "steps": STEPS,
            "gap": gap(first, gradients(x, y)) if first else None,
            "last_gap": gap(first, gradients(x[-MICRO:], y[-MICRO:], 1 / STEPS)) if first
            else None, "has_zero_grad": hasattr(adam(), "zero_grad")}


def d48(code: str) -> dict:
    """The policy the snippet sets, then a tiny Keras model trained the same steps under
    float32 and under it, three seeds each: held-out losses (start and end)."""
    result = run(code, {"tf": tf})
    policy = tf.keras.mixed_precision.global_policy()
    x_test, y_test = data(99, 256)
    losses = {}
    for name in ("float32", policy.name):
        tf.keras.mixed_precision.set_global_policy(name)
        runs = []
        for seed in SEEDS:
            model = tiny_model(seed)
            model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss="mse")
            x, y = data(10 + seed, 512)
            start = float(model.evaluate(x_test, y_test, verbose=0))
            model.fit(x, y, batch_size=32, epochs=4, verbose=0)
            runs.append({"start": start, "loss": float(model.evaluate(x_test, y_test, verbose=0)),
                         "optimizer": type(model.optimizer).__name__})
        losses[name] = runs
    tf.keras.mixed_precision.set_global_policy(policy)   # as the snippet left it
    return {**result, "policy": policy.name, "compute_dtype": policy.compute_dtype,
            "variable_dtype": policy.variable_dtype, "losses": losses}


RUNNERS = {"D.3.1": d31, "D.4.6": d46, "D.4.8": d48}   # in this order: D.3.1 before any GPU use


def main() -> None:
    global tf
    import tensorflow

    tf = tensorflow
    snippets = json.load(sys.stdin)
    results = {sid: RUNNERS[sid](snippets[sid]) for sid in RUNNERS if sid in snippets}
    print(MARK + json.dumps({"tensorflow": tf.__version__, "keras": tf.keras.__version__,
                             "snippets": results}), flush=True)


if __name__ == "__main__":
    main()
