"""a800lab: `python -m a800lab <command> ...` (also installed as `a800lab`).

    python -m a800lab doctor [--json]                  environment and topology report
    python -m a800lab peak [--json]                    achievable matmul rate and copy bandwidth
    python -m a800lab sweep matmul --size 1024 4096 --precision fp32 bf16 --out runs.jsonl
    python -m a800lab sweep tiles --size 4096 --precision bf16 --block-m 64 128 256 \
        --block-n 64 128 256 --out tiles.jsonl        # the tile kernel (CPU: its stand-in)
    python -m a800lab tune tiles --size 4096 --precision bf16 [--out trials.jsonl]
                                                       # fastest tile, stored and reused
    python -m a800lab check tiles --card A800 --precision bf16 [--size 4096]
                                                       # the compiler's verdict on every tile
                                                       # for a card, no GPU needed
    python -m a800lab sweep train --model transformer --batch-size 8 32 128 \
        --precision fp32 bf16 --accum-steps 1 4 --out train.jsonl   # training steps
    python -m a800lab max-batch --model transformer --precision bf16 --target-batch 1024
                                                       # largest micro-batch, verified
    python -m a800lab diff a800/runs.jsonl h200/runs.jsonl [--json]
                                                       # what differs between two machines
    python -m a800lab health [--stress] [--json]       # ECC, remapped rows, NCCL settings;
                                                       # --stress flags slow cards
    python -m a800lab comm collectives --op all_reduce all_gather --size 1K 1M 64M \
        --out comm.jsonl                               # algbw/busbw on 2 gloo ranks or all GPUs
    python -m a800lab comm ddp --hook allreduce fp16_compress powersgd --out ddp.jsonl
    torchrun --nproc-per-node 8 -m a800lab comm collectives --size 1M 1G --out comm.jsonl
                                                       # every process a rank, any node count
    python -m a800lab report [--quick | --full] [--out report/]
                                                       # the guide's claims and this box's
                                                       # health: report.html + report.json
    python -m a800lab report --compare a800-box/ h200-box/    # two reports side by side

A sweep appends one JSON line per point as it is measured; run the same command again to resume
(points already in the file for this environment are skipped). Ctrl-C stops after saving what was
measured. `tune tiles` prints the winner (and, for the Triton kernel, the `triton.Config(...)`
line to paste into your own @triton.autotune) and says when its lead is inside the measurement
noise. Each point prints one line; a `!` marks a noisy point and says why (timing spread, CPU
oversubscription). Open the file in a notebook with `a800lab.load_results("runs.jsonl")`.
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
