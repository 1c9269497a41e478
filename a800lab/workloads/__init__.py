"""What the lab measures: each lab's validated specs and sweep point functions, built on
a800lab.core (timing, precision, memory) and never importing widgets or figures.

    matmul.py      MatmulSpec, matmul_point: torch.matmul (cuBLAS) over shapes and precisions
    precision.py   formats, error vs k, fp8 accumulation (chapter 03)
    sparsity.py    2:4 structured sparsity: sparse_point (chapter 03)
    peak.py        measure_peak, record_peaks / measured_peak, peak_point: achievable peaks
    tiles/         the tile lab (chapter 02): the Triton kernel, its CPU stand-in, card limits,
                   the tuner, tile and wave quantisation
    training/      the training lab (chapters 04-06): TrainSpec, Trainer, train_point, memory,
                   max batch, loss scaling, numerics (held-out loss, fp16 embedding tables)
    pipeline.py    loader -> copy -> step, the device's idle fraction (chapter 07); placement.py
                   (an embedding table on the CPU or the device), streams.py (copy/compute overlap)
    comm/          the communication lab (chapter 08): collectives, DDP hooks, ranks launched
    energy.py      EnergyMeter: NVML's energy counter, power x time, RAPL (chapter 10)
    usage.py       metered runs: J/sample, J per TFLOP and cost per million samples (chapter 10)
    health.py      ECC, remapped rows, retired pages; stress.py: slow cards vs siblings, a
                   throughput check (ch. 09); dcgm.py: DCGM's diagnostic, found and run

    from a800lab.workloads.matmul import MatmulSpec, matmul_point
    from a800lab.workloads.tiles import tiled_matmul_point
    from a800lab.workloads.training import TrainSpec, Trainer, train_point
    from a800lab.workloads.comm import busbw_gbs, collective_point

Each lab's package (tiles, training, comm) exports its names from the package itself, importing
a module only when a name of it is first used.

The Triton kernel itself is in a800lab.workloads.tiles.kernel, imported on first use (set
TRITON_INTERPRET=1 before that import to run it under the Triton interpreter).
"""
