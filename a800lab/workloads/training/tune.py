"""Tune a training configuration for a target effective batch: successive halving over the
candidates (candidates.py), the frontier of samples/s against peak memory, the code to paste;
the winner stored (never from a contended CPU) and reused unless `force`.

    outcome = tune_train(model="transformer", target_batch=256)     # or task=custom_task(...)
    print(outcome.summary()); print(outcome.snippet) # what `tune train` prints
"""

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch

from ...core.backends import resolve_device
from ...core.cancel import CancelToken
from ...core.checks import positive_int
from ...core.knobs import knobs, levers_set
from ...core.precision import HALF_DTYPES
from ...core.results import Record
from ...core.search import SearchResult
from ...core.store import TunedStore
from ...core.tuner import Tuned, drive, lever_grid
from ...core.units import format_bytes
from ..models.levers import ATTENTION_ENUM, optimizer_flags
from ..models.presets import Task, default_size, preset
from .candidates import LEVERS, WORKLOAD, TuneSession, default_axes
from .max_batch import DEFAULT_MARGIN
from .spec import TrainSpec, check_precision


def model_fingerprint(task: Task, device: str) -> str:
    """12 hex characters of the model's structure, parameters and batch shapes."""
    model = task.make_model()
    inputs, targets = task.make_batch(2, torch.Generator(device).manual_seed(0))
    flat = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    text = repr(model) + repr([(n, tuple(p.shape), str(p.dtype))
                               for n, p in model.named_parameters()])
    text += repr([(tuple(t.shape), str(t.dtype)) for t in [*flat, targets]])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def describe_candidate(config: Mapping) -> str:
    """"fp32, 64 x 4, checkpointing off, compile off, optimizer fused" (other levers only when
    not at their defaults)."""
    text = config["precision"]
    if "batch_size" in config:
        text += f", {config['batch_size']} x {config['accum_steps']}"
    text += f", checkpointing {'on' if config.get('checkpointing') else 'off'}"
    text += f", compile {config.get('compile', 'off')}"
    text += f", optimizer {config.get('optimizer_impl', 'default')}"
    return ", ".join([text, *levers_set(TrainSpec, config, ("compile", "optimizer_impl"))])


@dataclass
class TuneOutcome(Tuned):
    """What tune_train did (core/tuner.Tuned): the entry (reused, stored or shown), the search,
    the session that planned and verified the candidates."""

    session: TuneSession | None = None

    def summary(self) -> str:
        """The winner (and its noise), the frontier, what was refused (why) or failed."""
        e = self.entry
        if not e:
            return "no result: " + (self.search.verdict if self.search else "stopped")
        lines = [f"! not stored: the last round ran on a contended CPU ({e['contended']}); "
                 "the result below is shown as measured, labelled; tune again with the "
                 "machine idle to store one"] if e.get("contended") else []
        lines += [f"winner: {describe_candidate(e['best'])}: {e['samples_per_s']:.4g} samples/s, "
                  f"peak {format_bytes(e['peak_bytes'])}; {noise_clause(e)}"]
        lines.append("frontier (samples/s vs peak memory, none both faster and smaller), "
                     "micro-batch x accumulation:")
        lines += [f"  {c['samples_per_s']:10.4g} samples/s  {format_bytes(c['peak_bytes']):>10}  "
                  f"{describe_candidate(c['config'])}" for c in e["frontier"]]
        if e.get("frontier_note"):
            lines.append(f"! {e['frontier_note']}")
        lines.append(f"{e['measured']} configs measured, {e['refused']} refused, {e['failed']} "
                     f"failed verification, in {e['wall_s']:.1f} s")
        lines += [f"  {line}" for line in refusal_lines(e.get("refusals", []))]
        return "\n".join(lines + self.failed_lines())


CLEAR = "clear of the noise"


def noise_clause(entry: Mapping) -> str:
    """How far the winner's lead can be trusted, in words (the CLI's and the panel's)."""
    noisy, trials = entry.get("noisy_trials", 0), entry.get("trials", "?")
    if entry.get("contended"):
        return ("timed on a contended CPU: the ranking may not hold (shown, not stored)"
                + (f"; {noisy} of {trials} trials noisy" if noisy else ""))
    if entry.get("within_noise"):
        return (f"within noise of {entry['within_noise']} other config(s): either may win a "
                "re-run")
    if noisy:
        return (f"ahead in the last round, but {noisy} of {trials} trials were noisy (timing "
                "spread, or the CPU shared with other work): the ranking may not hold")
    return CLEAR


def storing_clause(entry: Mapping, where="") -> str:
    """What storing the winner means, said once beside the noise clause (which says any doubt);
    "" when it was not stored (a contended round: the noise clause says so)."""
    if not entry.get("stored"):
        return ""
    stored = f"stored in {where}" if where else "stored"
    if noise_clause(entry) == CLEAR:
        return f"{stored}: the next tune with these settings reuses it (--force tunes again)"
    return (f"{stored} all the same, as a pick rather than a clear winner: the next tune with "
            "these settings reuses it without measuring; tune again with the machine idle "
            "(--force, or force=True) before relying on it")


def refusal_lines(refusals: list[dict]) -> list[str]:
    """"refused 3 (fp32, checkpointing on, ...; ...): <why>", one line per reason."""
    by_reason: dict[str, list[str]] = {}
    for refusal in refusals:
        by_reason.setdefault(refusal["reason"], []).append(describe_candidate(refusal["config"]))
    return [f"refused {len(configs)} ({'; '.join(configs)}): {reason}"
            for reason, configs in by_reason.items()]


def _refusals(*refused: Mapping[str, str]) -> list[dict]:
    """Every refused config with its reason (the grid's, the search's)."""
    return [{"config": json.loads(key), "reason": why} for r in refused for key, why in r.items()]


def _frontier_note(result: SearchResult, candidates: list[dict], frontier: list[dict],
                   target_batch: int) -> str:
    """"" when the winner is on its frontier, else why not (rates from different rounds)."""
    if any(c["config"] == result.best for c in frontier):
        return ""
    winner = next(c for c in candidates if c["config"] == result.best)
    above = [c for c in frontier if c["samples_per_s"] >= winner["samples_per_s"]
             and c["peak_bytes"] <= winner["peak_bytes"]] or frontier
    beater = above[0]
    same_round = [t for t in result.trials if t.config == result.best
                  and t.round == beater["round"]]
    there = (f", where the winner ran at {target_batch / (same_round[0].median_ms / 1e3):.4g} "
             "samples/s") if same_round else ""
    return (f"the winner is off the frontier: {describe_candidate(beater['config'])} shows "
            f"{beater['samples_per_s']:.4g} samples/s from round {beater['round'] + 1} "
            f"({beater['budget_s']:.3g} s of timing){there}; rates from different rounds do not "
            "compare (the machine's speed changed between them), the last round decides")


def tune_train(task: Task | None = None, *, model: str = "mlp", size: str | None = None,
               target_batch: int = 256, axes: Mapping | None = None, optimizer: str = "adamw",
               lr: float | None = None, device: str = "auto", limit_bytes: int | None = None,
               margin: float = DEFAULT_MARGIN, budget_s: float = 0.5,
               store: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
               force: bool = False, on_trial: Callable[[Record], None] | None = None,
               on_stage: Callable[[str], None] | None = None,
               cancel: CancelToken | None = None) -> TuneOutcome:
    """Tune your `task` (else the preset `model` at `size`) for `target_batch`; `limit_bytes`:
    the memory to fit in (default: the device's free memory, 256 MiB on a CPU)."""
    started = time.perf_counter()
    device = resolve_device(device)
    positive_int("target_batch", target_batch, "256")
    axes = {**default_axes(device), **(axes or {})}
    levers = lever_grid(axes, LEVERS, "tune_train")
    size = size or default_size(device)
    base = TrainSpec(model=model if task is None else task.name, size=size,
                     optimizer=optimizer, lr=lr)
    for config in levers:  # a bad value: ValueError naming it, before anything runs
        check_precision(replace(base, **config).precision, device)
    task = task or preset(base.model, size)
    session = TuneSession(task, base, target_batch, device, axes=axes, limit_bytes=limit_bytes,
                          margin=margin, out=out, on_trial=on_trial, on_stage=on_stage,
                          cancel=cancel)
    key = TunedStore.key(workload=WORKLOAD, fingerprint=session.log.env["fingerprint"],
                         model=model_fingerprint(task, device), torch=torch.__version__,
                         target_batch=target_batch, optimizer=optimizer, lr=lr,
                         limit_bytes=limit_bytes, margin=margin)

    def plan() -> list[dict]:
        grid = session.plan()
        session.say(f"searching {len(grid)} configs ({len(session.refused)} refused"
                    + (", why:)" if session.refused else ")"))
        for line in refusal_lines(_refusals(session.refused)):
            session.say(f"  {line}")
        return grid

    def facts(outcome: TuneOutcome) -> dict:
        result, candidates, env = outcome.search, outcome.candidates, session.log.env
        best = next(c for c in candidates if c["config"] == result.best)
        note = (f"tuned by a800lab on {env['device_name']}: {best['samples_per_s']:.4g} "
                f"samples/s, peak {format_bytes(best['peak_bytes'])}")
        frontier = outcome.frontier
        return dict(
            samples_per_s=best["samples_per_s"], peak_bytes=best["peak_bytes"],
            within_noise=len(result.rivals), within_noise_configs=result.rivals,
            frontier=frontier, candidates=candidates,
            frontier_note=_frontier_note(result, candidates, frontier, target_batch),
            measured=len(candidates), refused=len(session.refused) + len(result.refused),
            refusals=_refusals(session.refused, result.refused),
            noisy_trials=sum(bool(r.noise.get("noisy")) for r in outcome.records),
            trials=len(outcome.records), failed=len(result.failed), bounds=session.bounds,
            target_batch=target_batch, device_name=env["device_name"], mode=env["mode"],
            model=task.description or task.name,
            snippet=training_snippet(result.best, optimizer=optimizer, lr=lr or task.lr,
                                     device=device, note=note),
            wall_s=time.perf_counter() - started)

    return drive(TuneOutcome(session=session), session.log, plan, session.validate,
                 session.evaluate, budget_s=budget_s, key=key, keyed_on=levers, store=store,
                 force=force, candidates=session.candidates, facts=facts, show_unstored=True)


_FP32_PRECISION_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def training_snippet(config: dict, *, optimizer: str, lr: float, device: str,
                     note: str = "") -> str:
    """A tuner's `config` as plain-torch code to paste: valid Python (the tests run it) that
    expects `make_model()`, `loss_fn(outputs, targets)` and a `loader` of micro-batches."""
    precision, accum = config["precision"], int(config.get("accum_steps", 1))
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    attention = config.get("attention", "default")
    lines = ["import contextlib", "", "import torch"]
    if config.get("checkpointing"):
        lines.append("from torch.utils.checkpoint import checkpoint")
    if attention != "default":
        lines.append("from torch.nn.attention import SDPBackend, sdpa_kernel")
    lines += ["", f"# {note}" if note else "# tuned by python -m a800lab tune train",
              f'device = "{device_type}"']
    if precision == "tf32":  # the API of the torch installed here (older ones: allow_tf32)
        lines += (['torch.backends.cuda.matmul.fp32_precision = "tf32"   # TF32 tensor cores',
                   'torch.backends.cudnn.conv.fp32_precision = "tf32"'] if _FP32_PRECISION_API
                  else ["torch.backends.cuda.matmul.allow_tf32 = True   # TF32 tensor cores",
                        "torch.backends.cudnn.allow_tf32 = True"])
    if precision == "fp32" and device_type == "cuda":  # the lab's fp32: no TF32 anywhere
        lines += (['torch.backends.cuda.matmul.fp32_precision = "ieee"',
                   'torch.backends.cudnn.conv.fp32_precision = "ieee"   # torch: TF32 convs']
                  if _FP32_PRECISION_API else
                  ["torch.backends.cuda.matmul.allow_tf32 = False",
                   "torch.backends.cudnn.allow_tf32 = False   # torch's default: TF32 convs"])
    lines += [declared.code for name, declared in knobs(TrainSpec).items()
              if declared.code and config.get(name, declared.default) != declared.default]
    cast = ", dtype=torch.bfloat16" if precision == "bf16_pure" else ""
    lines.append(f"model = make_model().to(device{cast})")
    if config.get("channels_last"):
        lines.append("model = model.to(memory_format=torch.channels_last)")
    if config.get("checkpointing"):
        lines += ["", "", "class Checkpointed(torch.nn.Module):",
                  '    """A block whose activations are recomputed in backward."""', "",
                  "    def __init__(self, block):", "        super().__init__()",
                  "        self.block = block", "",
                  "    def forward(self, *args):",
                  "        return checkpoint(self.block, *args, use_reentrant=False)", "", "",
                  "# each repeated block (an nn.Sequential model: wrap its children instead)",
                  "model.blocks = torch.nn.ModuleList(Checkpointed(b) for b in model.blocks)"]
    flags = "".join(f", {k}={v}" for k, v in optimizer_flags(config.get("optimizer_impl",
                                                                         "default")).items())
    if optimizer == "adamw":
        lines.append(f"optimizer = torch.optim.AdamW(model.parameters(), lr={lr:g}{flags})")
    else:
        lines.append(f"optimizer = torch.optim.SGD(model.parameters(), lr={lr:g}, "
                     f"momentum=0.9{flags})")
    mode = config.get("compile", "off")
    if mode == "off":
        lines.append("step_model = model")
    else:
        arg = "" if mode == "default" else f', mode="{mode}"'
        lines.append(f"step_model = torch.compile(model{arg})   # compiles at the first step")
    scaler = precision == "fp16"
    if scaler:
        lines.append("scaler = torch.amp.GradScaler(device)   # fp16 gradients need scaling")
    context = (f"torch.autocast(device, dtype={HALF_DTYPES[precision]})"
               if precision in HALF_DTYPES else "contextlib.nullcontext()")
    if attention != "default":
        context += f", sdpa_kernel(SDPBackend.{ATTENTION_ENUM[attention]})"
    lines += [f"accum_steps = {accum}   # micro-batches of {config['batch_size']}: an "
              f"effective batch of {config['batch_size'] * accum}",
              "for i, (x, y) in enumerate(loader):",
              "    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"]
    if precision == "bf16_pure":
        lines.append("    x = x.to(torch.bfloat16) if x.is_floating_point() else x")
    if config.get("channels_last"):
        lines.append("    x = x.contiguous(memory_format=torch.channels_last)")
    out = "step_model(x).float()" if precision == "bf16_pure" else "step_model(x)"
    lines += [f"    with {context}:",
              f"        loss = loss_fn({out}, y) / accum_steps   # the mean over the effective "
              "batch",
              "    scaler.scale(loss).backward()" if scaler else "    loss.backward()",
              "    if (i + 1) % accum_steps == 0:"]
    lines += (["        scaler.step(optimizer)   # skipped when the gradients hold inf/NaN",
               "        scaler.update()"] if scaler else ["        optimizer.step()"])
    lines.append("        optimizer.zero_grad(set_to_none=True)")
    return "\n".join(lines) + "\n"
