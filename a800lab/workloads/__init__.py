"""Workloads the lab measures: each offers a validated spec and a sweep point function.

    from a800lab.workloads.matmul import MatmulSpec, matmul_point          # torch.matmul
    from a800lab.workloads.tiled_matmul import tiled_matmul_point          # tiles, any back end
    from a800lab.workloads.tile_config import check_config, export_config  # card limits, export
    from a800lab.workloads.training import TrainSpec, Trainer, train_point   # a training step
    from a800lab.workloads.max_batch import find_max_batch_for, plan_effective_batch
    from a800lab.workloads.loss_scaling import gradient_sample, compare_scaling  # fp16 range
    from a800lab.workloads.energy import EnergyMeter          # NVML energy counter, power, RAPL
    from a800lab.workloads.usage import metered_run, cost_per_million_samples_usd  # J/sample, $
    from a800lab.workloads.health import health_report        # ECC, remapped rows, retired pages
    from a800lab.workloads.stress import stress_report, flag_cards   # slow cards vs siblings
    from a800lab.workloads.pipeline import pipeline_point, run_pipeline  # loader -> step, idle
    from a800lab.workloads.placement import placement_point     # embedding table CPU vs GPU
    from a800lab.workloads.streams import stream_overlap        # copy/compute on two streams
    from a800lab.workloads.comm import collective_point, busbw_gbs   # on a live process group
    from a800lab.workloads.comm_ddp import ddp_point            # DDP hooks, no_sync, buckets
    from a800lab.workloads.comm_runs import run_comm            # ranks started, fed, stopped

The Triton kernel itself is in a800lab.workloads.tile_kernel, imported on first use (set
TRITON_INTERPRET=1 before that import to run it under the Triton interpreter). Workloads build on
a800lab.core (timing, precision, memory) and never import widgets or plots.
"""
