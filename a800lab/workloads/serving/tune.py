"""Tune serving under a latency target: the most samples/s whose p99 stays under `p99_ms`, by
the search every tuner shares (core/search.py), then measured again with a fresh server.

    outcome = tune_serve(p99_ms=5.0, model="transformer")   # or task=custom_task(...)
    print(outcome.summary()); print(outcome.snippet)       # what `tune serve` prints
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ...core.backends import resolve_device
from ...core.knobs import levers, levers_set, tuner_axes
from ...core.precision import HALF_DTYPES
from ...core.results import Record
from ...core.search import config_key
from ...core.tuner import TrialLog, Tuned, drive, lever_grid
from .point import serve_point
from .spec import (
    DEFAULT_REQUESTS,
    ServeRun,
    ServeSpec,
    serving_spec,
    serving_unavailable,
)

WORKLOAD = "tune-serve"
LEVERS = ("batch_size", "precision", *levers(ServeSpec))  # what a config may vary


def default_axes(device: str) -> dict:
    """What tune_serve varies unless told: batch sizes and precisions; on a GPU CUDA graphs too
    (compile modes are opt-in: each batch size compiles anew): ServeSpec's `tune` values."""
    return tuner_axes(ServeSpec, device)


def describe_serving(config: Mapping) -> str:
    """"batch 8, bf16, compile off, graphs on" (the other levers only where not at default)."""
    text = (f"batch {config['batch_size']}, {config['precision']}, compile "
            f"{config.get('compile', 'off')}, graphs {'on' if config.get('graphs') else 'off'}")
    return ", ".join([text, *levers_set(ServeSpec, config, ("compile", "graphs"))])


@dataclass
class ServeTuneOutcome(Tuned):
    """What tune_serve found (core/tuner.Tuned): the search, the candidates (samples/s against
    p99), the winner's re-measurement; `winner`: the config whose re-measurement met."""

    p99_ms: float = 0.0
    cost = "p99_ms"

    def summary(self) -> str:
        """The winner and its re-measurement, the noise, the frontier, what failed."""
        result, again = self.search, self.remeasured
        lines = []
        if result.contended:
            lines.append(f"! the last round ran on a contended CPU ({result.contended}): the "
                         "ranking may not hold; tune again on a quiet machine")
        if self.winner is None:
            why = (f"the re-measured p99 missed {self.p99_ms:g} ms for the "
                   f"{again.get('tries', 0)} best" if again else
                   f"no config met a p99 of {self.p99_ms:g} ms in the search; nothing was "
                   "measured again")
            lines.append(f"no config: {why}; raise --p99-ms or try smaller batches")
        else:
            rivals = len(result.rivals)
            lines.append(f"winner: {describe_serving(self.winner)}: {again['samples_per_s']:.4g} "
                         f"samples/s, p99 {again['p99_ms']:.3g} ms <= {self.p99_ms:g} ms in a "
                         f"separate re-measurement ({again['requests']} requests)"
                         + (f"; within noise of {rivals} other config(s)" if rivals else ""))
        lines.append("frontier (samples/s vs p99; * meets the target):")
        lines += [f"  {c['samples_per_s']:10.4g} samples/s  p99 {c['p99_ms']:8.3g} ms "
                  f"{'*' if c['meets_target'] else ' '} {describe_serving(c['config'])}"
                  for c in self.frontier]
        over = sorted((c for c in self.candidates if not c["meets_target"]),
                      key=lambda c: c["p99_ms"])
        lines.append(f"{len(self.candidates)} configs measured ({len(over)} over the target), "
                     f"{len(result.refused)} refused, in {result.wall_s:.1f} s")
        lines += [f"  over the target: {describe_serving(c['config'])} (p99 "
                  f"{c['p99_ms']:.3g} ms)" for c in over]
        return "\n".join(lines + self.failed_lines())


def tune_serve(p99_ms: float, task=None, *, model: str = "transformer", size: str | None = None,
               axes: Mapping | None = None, device: str = "auto",
               requests: int = DEFAULT_REQUESTS, budget_s: float = 0.3, out=None,
               on_trial: Callable[[Record], None] | None = None, cancel=None,
               run_id: str | None = None) -> ServeTuneOutcome:
    """The most samples/s with p99 <= `p99_ms` for your `task`, else the preset `model`."""
    ServeRun(p99_ms=p99_ms)  # refuses a target that is no latency
    device = resolve_device(device)
    axes = {**default_axes(device), **(axes or {})}
    base = serving_spec({"model": model, "size": size}, device, task)
    grid = lever_grid(axes, LEVERS, "tune_serve")
    for config in grid:  # a bad value: ValueError naming it, before anything runs
        replace(base, **config)
    log = TrialLog(WORKLOAD, device, out, on_trial, cancel, run_id or "")

    def point(budget: float, **config) -> dict:
        got = serve_point(model=base.model, size=base.size, task=task, device=device,
                          requests=requests, budget_s=budget, cancel=cancel, **config)
        if "p99_ms" in got:
            got.update(p99_target_ms=p99_ms, meets_target=got["p99_ms"] <= p99_ms,
                       budget_s=budget)
        return got

    def measured(config: dict, budget: float) -> Record:
        return log.measure(lambda model, size, **params: point(budget, **params),
                           {"model": base.model, "size": base.size, **config})

    def validate(config: dict) -> None:
        reason = serving_unavailable(replace(base, **config), device)
        if reason:
            raise ValueError(reason)

    def evaluate(config: dict, budget: float, first: bool) -> dict:
        record = measured(config, budget)
        if record.outcome == "ok" and not record.metrics["meets_target"]:
            return {"outcome": "over-target", "message": f"p99 {record.metrics['p99_ms']:.3g} "
                                                         f"ms > {p99_ms:g} ms"}
        return log.timed(record, per=config["batch_size"])

    def remeasure(config: dict, tries: int) -> dict:
        record = measured(config, budget_s)
        m = record.metrics
        return {} if record.outcome != "ok" else {
            "config": config, "tries": tries, "p50_ms": m["p50_ms"], "p99_ms": m["p99_ms"],
            "requests": m["requests"], "samples_per_s": record.throughput,
            "meets_target": m["meets_target"], "noisy": record.noise.get("noisy", False),
            "run_id": record.run_id}

    def facts(outcome: ServeTuneOutcome) -> dict:
        again = outcome.remeasured
        return {"snippet": serving_snippet(again["config"], device, note=(
            f"tuned by a800lab on {log.env['device_name']}: {again['samples_per_s']:.4g} "
            f"samples/s, p99 {again['p99_ms']:.3g} ms (target {p99_ms:g} ms)"))}

    return drive(ServeTuneOutcome(p99_ms=p99_ms), log, grid, validate, evaluate,
                 budget_s=budget_s, candidates=lambda result: _candidates(log.records),
                 remeasure=remeasure, facts=facts)


def _candidates(records: list[Record]) -> list[dict]:
    """Each config's latest ok trial (the search's rounds, not the re-measurement)."""
    latest = {}
    for r in records:
        if r.outcome == "ok":
            config = {k: r.params[k] for k in LEVERS if k in r.params}
            latest[config_key(config)] = {
                "config": config, "samples_per_s": r.throughput, "p99_ms": r.metrics["p99_ms"],
                "p50_ms": r.metrics["p50_ms"], "meets_target": r.metrics["meets_target"],
                "noisy": bool(r.noise.get("noisy")), "budget_s": r.metrics.get("budget_s")}
    return list(latest.values())


def serving_snippet(config: Mapping, device: str, note: str = "",
                    delay_ms: float | None = None) -> str:
    """Plain-torch code answering request batches of up to batch_size with `config` (a CUDA
    graph when graphs is on, smaller batches padded into it); floating inputs are cast to the
    serving dtype, integer ones (token ids) kept. It expects make_model() and
    make_batch(batch_size), as --user-model files define. `delay_ms`: the dynamic batcher's
    settings are named (and Triton's equivalent)."""
    precision = config["precision"]
    dtype = HALF_DTYPES.get(precision)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    cast = f".to({dtype})" if dtype else ""
    layout = ".to(memory_format=torch.channels_last)" if config.get("channels_last") else ""
    size = config["batch_size"]
    lines = ["import torch", "", f"# {note or 'tuned by python -m a800lab tune serve'}",
             f'device = "{device_type}"',
             f"batch_size = {size}  # requests are answered in batches of at most this size"]
    if delay_ms is not None:
        hold = f"while fewer wait, hold the oldest up to {delay_ms:g} ms" if delay_ms else \
            "never hold one for more"
        lines += [f"# dynamic batching: take up to {size} waiting requests; {hold}",
                  "# (Triton Inference Server: "
                  f"max_batch_size: {size}, dynamic_batching {{ max_queue_delay_microseconds: "
                  f"{round(delay_ms * 1000)} }})"]
    lines.append(f"model = make_model().eval().to(device){cast}{layout}")
    if precision == "tf32":
        lines.append("torch.backends.cuda.matmul.allow_tf32 = True  # TF32 tensor-core matmuls")
        lines.append("torch.backends.cudnn.allow_tf32 = True")
    if config.get("compile", "off") != "off":
        mode = config["compile"]
        lines.append("model = torch.compile(model" + ("" if mode == "default" else
                                                      f', mode="{mode}"') + ")")
    lines += ["", "", "def to_device(x):", '    """A request on the device: floating inputs in '
              'the serving dtype, token ids as they are."""']
    if dtype:
        lines += ["    if x.is_floating_point():",
                  f"        return x.to(device, {dtype}, non_blocking=True)"]
    lines += ["    return x.to(device, non_blocking=True)", "", ""]
    if config.get("graphs"):
        lines += [
            "# the input buffer the graph reads; every request batch is copied into its rows",
            "static_input = to_device(make_batch(batch_size)[0])",
            "side = torch.cuda.Stream()", "side.wait_stream(torch.cuda.current_stream())",
            "with torch.inference_mode():", "    with torch.cuda.stream(side):  # warm up",
            "        for _ in range(3):", "            model(static_input)",
            "    torch.cuda.current_stream().wait_stream(side)",
            "    graph = torch.cuda.CUDAGraph()", "    with torch.cuda.graph(graph):",
            "        static_output = model(static_input)", "", "",
            "def answer(x):", '    """A request batch (n <= batch_size, ...) -> its outputs '
            '(a smaller batch runs padded)."""', "    n = x.shape[0]",
            "    with torch.inference_mode():", "        static_input[:n].copy_(to_device(x))",
            "        graph.replay()", "        return static_output[:n].clone()"]
    else:
        lines += ["def answer(x):",
                  '    """A request batch (n <= batch_size, ...) -> its outputs."""',
                  "    with torch.inference_mode():", "        return model(to_device(x))"]
    return "\n".join(lines) + "\n"
