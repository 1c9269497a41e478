"""Per-slot KV-cache generation: the protocol a generator follows (the transformer preset is
the built-in one), its decode step over slots of different lengths checked against the full
fp32 forward, and a user generator's faults told in one line naming its file.

    gen = preset_generator("small")                  # or your make_generator()
    cache = gen.new_cache(8, "cpu", torch.float32)   # 8 slots of gen.context positions
    logits = gen.prefill(cache, 0, prompt)           # prompt (t,) long -> (vocab,)
    logits = gen.decode(cache, tokens[:n], lengths)  # slots 0..n-1, each at its own length
    check_generator(gen, reference, "fp32", "cpu")   # {"rel_error", ...}, "outcome" if wrong

The protocol: a file's `make_generator()` returns (the same weights on every call) an object,
best a torch.nn.Module, with
  context         int: positions one sequence may hold (prompt + output)
  vocab           int: token ids 0 .. vocab-1
  to(device, dtype) -> itself, moved and cast (nn.Module's own)
  __call__(tokens) (b, t) long -> (b, t, vocab) logits: the full forward (the reference)
  new_cache(slots, device, dtype) -> a tensor, or a list of tensors, each with the slot as its
                  first dimension (a slot is moved by copying its rows)
  prefill(cache, slot, prompt) prompt (t,) long -> (vocab,) logits of its last position, its
                  keys and values written into `slot` at positions 0 .. t-1
  decode(cache, tokens, lengths) tokens (n,) long on the device, the newest token of slots
                  0 .. n-1; lengths: n ints, the tokens each slot holds before it -> (n, vocab)
                  logits; each token's keys and values written at its slot's length
  step_bytes(batch, context, element_bytes) optional: {"bytes_per_step": ...} read by one
                  decode step (for the memory-bandwidth bound)
"""

import contextlib
import inspect
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...core.cancel import Cancelled
from ...core.memory import is_oom
from ...core.precision import matmul_precision
from ..models.presets import TinyGPT, preset, seeded
from .decode import cached_step, step_bytes
from .spec import output_gap

CHECK_PROMPTS = (3, 7, 12)  # prompt lengths of the check's sequences: one decode, three lengths
CHECK_STEPS = 2             # decode steps checked after the prefills


class TransformerGenerator(nn.Module):
    """The transformer preset (TinyGPT) behind the generator protocol."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model = model
        self.context, self.vocab = model.pos.shape[0], model.head.out_features
        self.heads = model.blocks[0].heads
        self.width = model.norm.normalized_shape[0]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)

    def new_cache(self, slots: int, device, dtype) -> torch.Tensor:
        """(slots, layers, keys|values, heads, context, head_dim)."""
        return torch.zeros(slots, len(self.model.blocks), 2, self.heads, self.context,
                           self.width // self.heads, device=device, dtype=dtype)

    def prefill(self, cache: torch.Tensor, slot: int, prompt: torch.Tensor) -> torch.Tensor:
        # cached_step's layout (layers, 2, batch, ...) as a view of this slot's rows
        view = cache[slot:slot + 1].permute(1, 2, 0, 3, 4, 5)
        return cached_step(self.model, prompt[None], view, 0)[0]

    def decode(self, cache: torch.Tensor, tokens: torch.Tensor, lengths) -> torch.Tensor:
        model, n, d = self.model, len(lengths), self.width
        span = max(lengths) + 1  # attention reads up to the longest slot, masked per slot
        pos = torch.tensor(lengths, device=tokens.device)
        rows = torch.arange(n, device=tokens.device)
        mask = (torch.arange(span, device=tokens.device) <= pos[:, None])[:, None, None]
        h = model.embed(tokens[:, None]) + model.pos[pos][:, None]
        for layer, block in enumerate(model.blocks):
            q, k, v = block.qkv(block.norm1(h)).view(n, 1, 3, self.heads, d // self.heads) \
                .permute(2, 0, 3, 1, 4)
            keys, values = cache[:n, layer, 0], cache[:n, layer, 1]
            keys[rows, :, pos] = k[:, :, 0]
            values[rows, :, pos] = v[:, :, 0]
            attn = F.scaled_dot_product_attention(q, keys[:, :, :span], values[:, :, :span],
                                                  attn_mask=mask)
            h = h + block.proj(attn.transpose(1, 2).reshape(n, 1, d))
            h = h + block.mlp(block.norm2(h))
        return model.head(model.norm(h[:, 0]))

    def step_bytes(self, batch: float, context: float, element_bytes: int) -> dict:
        return step_bytes(self.model, batch, context, element_bytes)


def preset_generator(size: str) -> TransformerGenerator:
    """The transformer preset at `size` as a generator (fixed weights)."""
    return TransformerGenerator(preset("transformer", size).make_model())


def cache_tensors(cache) -> list[torch.Tensor]:
    return list(cache) if isinstance(cache, (list, tuple)) else [cache]


def move_slot(cache, src: int, dst: int) -> None:
    """Slot `src`'s rows copied into slot `dst` (compaction: active slots stay 0 .. n-1)."""
    for tensor in cache_tensors(cache):
        tensor[dst] = tensor[src]


def source_of(make_generator) -> str | None:
    """The file a user's make_generator comes from (None for the preset)."""
    if make_generator is None:
        return None
    try:
        return inspect.getsourcefile(make_generator) or repr(make_generator)
    except TypeError:
        return repr(make_generator)


@contextlib.contextmanager
def blamed(source: str | None):
    """A fault in a user generator (`source`: its file) as one ValueError naming the file, the
    line and the fault; out-of-memory and a cancel pass as they are."""
    try:
        yield
    except (Cancelled, KeyboardInterrupt):
        raise
    except Exception as exc:
        if source is None or is_oom(exc):
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if Path(f.filename).resolve() == Path(source).resolve()]
        where = f" (line {own[-1].lineno}, in {own[-1].name})" if own else ""
        text = str(exc).strip().splitlines()
        raise ValueError(f"the generator in {source} failed{where}: {type(exc).__name__}: "
                         f"{text[0] if text else ''}") from None


def _logits(out, rows: int, vocab: int, what: str) -> torch.Tensor:
    shape = tuple(getattr(out, "shape", ()))
    if not isinstance(out, torch.Tensor) or shape != ((rows, vocab) if rows else (vocab,)):
        want = f"({rows}, {vocab})" if rows else f"({vocab},)"
        raise ValueError(f"{what} returned {type(out).__name__} of shape {shape}; it must give "
                         f"logits of shape {want}")
    return out.float()


def check_generator(gen, reference, precision: str, dtype, device: str) -> dict:
    """Prefill sequences of three lengths into slots 0-2, end the middle one (slot 2 moved
    into slot 1, as the continuous scheduler packs them), decode CHECK_STEPS steps over the
    rest, and compare every logit row with `reference`'s full fp32 forward (output_gap:
    "outcome" "wrong" when off)."""
    vocab = int(gen.vocab)
    prompts = [p for p in CHECK_PROMPTS if p + CHECK_STEPS <= int(gen.context)] or [1]
    g = torch.Generator("cpu").manual_seed(1)
    seqs = [torch.randint(0, vocab, (p + CHECK_STEPS,), generator=g).to(device) for p in prompts]
    live = [0, *range(2, len(seqs))] if len(seqs) > 2 else list(range(len(seqs)))
    with torch.inference_mode():
        cache = gen.new_cache(len(seqs), device, dtype)
        got = [_logits(gen.prefill(cache, slot, seq[:p]), 0, vocab, "prefill()")[None]
               for slot, (seq, p) in enumerate(zip(seqs, prompts, strict=True))]
        if len(live) < len(seqs):
            move_slot(cache, len(seqs) - 1, 1)
        for i in range(CHECK_STEPS):
            tokens = torch.stack([seqs[j][prompts[j] + i] for j in live])
            got.append(_logits(gen.decode(cache, tokens, [prompts[j] + i for j in live]),
                               len(live), vocab, "decode()"))
        with matmul_precision("fp32"):
            full = [reference(seq[None]).float()[0] for seq in seqs]
        expected = [torch.stack([f[p - 1] for f, p in zip(full, prompts, strict=True)])]
        expected += [torch.stack([full[j][prompts[j] + i] for j in live])
                     for i in range(CHECK_STEPS)]
    return output_gap(torch.cat(got), torch.cat(expected), precision)


def built(make_generator, device: str, dtype):
    """make_generator() under a fixed seed, in eval mode where it has one, moved and cast."""
    gen = seeded(make_generator)
    if callable(getattr(gen, "eval", None)):
        gen.eval()
    return gen.to(device, dtype)
