"""The tuning guide's claims, every one, in the lab's words: the register's main part
(a800lab.report.register adds the datasheet checks beside them and the Claim type's rules).

    from a800lab.report.guide import GUIDE_CLAIMS
    [c.id for c in GUIDE_CLAIMS if c.not_measurable]   # the rows no measurement can decide

Each entry says where the claim stands in the guide, its figure as written, and, for the ones
the lab measures, its reading (what is compared with what: model, baseline, configuration; where
the guide leaves a choice, which one was made and what else is shown), the method and the rule.
Paraphrases are the lab's; figures are the guide's.
"""

from __future__ import annotations

from functools import partial

from .claims import Claim

G, DOC2 = "the guide", "the guide's second document"
TC, HBM, LINKS, ENERGY = "tensor cores", "HBM (GPU memory)", "NVLink and NCCL", "GPU energy"
AMP = "AMP (fp16 autocast + GradScaler over fp32 master weights: the guide's FP16/FP32 recipe)"
DEFAULT_FP32 = "the framework's default fp32 (PyTorch: IEEE matmuls, TF32 cuDNN convolutions)"
MODELS = ("the guide's models: torchvision's ResNet-50 (224x224) and a GPT-2-small-shaped "
          "Transformer (12 layers, d=768, 1024 tokens)")
CASE = ("a customer's workload, cluster and before/after configuration the guide does not "
        "give: there is nothing to rerun")
case = partial(Claim, source=G, section="customer cases", chapter="10", not_measurable=CASE)

GUIDE_CLAIMS: tuple[Claim, ...] = (
    # ---- summary table ---------------------------------------------------------------------
    Claim("deploy_complexity", G, "summary table",
          "containerised deployment cuts deployment complexity by 30%", "30%", "09",
          not_measurable="'complexity' has no unit the guide defines and no before/after is "
          "given; what is checkable is that deployments are the same: chapter 09's container, "
          "Kubernetes and Slurm recipes write doctor.json, and `diff` names every difference"),
    Claim("tc_peak", G, "summary table",
          "TensorCore blocking with instruction pipelining reaches 92% of peak", "92%", "02",
          reading="the best tile of the lab's Triton tile kernel (software-pipelined loads, "
          "num_stages >= 3) on a 4096^3 bf16 matmul, as % of the card's dense datasheet peak",
          other="cuBLAS (torch.matmul) at the same shape is shown beside, as % of the same peak",
          method="the report's tiles step (a grid of tiles) and guide_tiles step (cuBLAS)",
          decides="holds if the best tile reaches 92% of the dense peak within its noise",
          judge="tc_peak", low=92.0, unit="%", about=TC),
    Claim("mp_memory", G, "summary table",
          "FP16/FP32 mixed precision cuts memory by 40%", "40%", "04",
          reading=f"peak memory of one training step, {AMP}, against {DEFAULT_FP32}, on "
          f"{MODELS}",
          other="bf16 autocast is shown beside; how much is saved depends on how much of the "
          "peak is activations (AdamW's fp32 state does not shrink)",
          method="the report's amp step", decides="holds if every model measured saves at "
          "least 40% of the step's peak (a step's memory repeats exactly: no noise)",
          judge="mp_memory", low=40.0, unit="%", about=HBM),
    Claim("idle_cut", G, "summary table",
          "CPU+GPU co-scheduling cuts the idle rate by 25%", "25%", "07",
          reading="the device's idle fraction in a loader -> copy -> step loop, as a relative "
          "cut (1 - idle after / idle before) from one lever: DataLoader workers, which prepare "
          "batches on the CPU while the GPU computes",
          other="pinned memory and then non_blocking copies are added one at a time, each with "
          "its own cut; an absolute cut of 25 points would be a different claim",
          method="the report's pipeline step (0 workers; workers; + pin_memory; + non_blocking)",
          decides="holds if the workers' relative cut reaches 25% within noise",
          judge="idle_cut", low=25.0, unit="%", about="GPU idle time (a CPU's 'device' is the "
          "CPU itself)"),
    Claim("compression", G, "summary table",
          "gradient compression and communication optimisation give a 3x training speed-up",
          "3x", "08",
          reading="DDP training samples/s over the box's GPUs: the best compressing comm hook "
          "(fp16 or PowerSGD) with no_sync accumulation (4 micro-batches, one sync per step) "
          "against plain all-reduce synchronising every micro-batch",
          other="compression alone (both runs with no_sync) is shown beside; communication "
          "time alone is not the claim (a training speed-up is)",
          method="the report's ddp step (hooks x sync modes)",
          decides="holds if the step speed-up reaches 3x within noise, the compressed run's "
          "held-out loss is within 2% of the plain run's, and the hook sent fewer bytes than "
          "fp32 gradients (PowerSGD: compressing after its warm-up)",
          judge="compression", low=3.0, about=LINKS),
    # ---- TensorCore section ----------------------------------------------------------------
    Claim("tile_shape", G, "TensorCore section",
          "16x16 or 32x8 blocks raise measured throughput by 2.5x", "2.5x", "02",
          reading="the lab's Triton kernel with the guide's block as its thread-block tile on a "
          "4096^3 bf16 matmul: 16x16x16, and for 32x8 its nearest expressible tile 32x16x16 "
          "(Triton's tl.dot needs every dimension >= 16), against the same product without "
          "tensor cores (IEEE fp32 cuBLAS, TF32 off)",
          other="read as fragment shapes, 16x16x16 and 32x8x16 are CUDA WMMA fragments for "
          "fp16; Triton picks the mma instruction itself (m16n8k16 on Ampere), so that reading "
          "has no knob here. Shown beside: the best tile found and cuBLAS bf16, each over the "
          "guide's tile",
          method="the report's guide_tiles step (and tiles for the best tile, peak for fp32)",
          decides="holds if the better guide tile over fp32 cuBLAS reaches 2.5x within noise",
          judge="tile_shape", low=2.5, about=TC),
    Claim("buffers_resnet50", G, "TensorCore section",
          "controlled FP16/FP32 conversion cuts intermediate buffers by 40% on ResNet-50",
          "40%", "04",
          reading=f"the activation bytes ResNet-50 saves for backward in one training step "
          f"(its intermediate buffers, counted tensor by tensor), {AMP}, against "
          f"{DEFAULT_FP32}; torchvision's resnet50(weights=None) at 224x224",
          method="the report's amp step", decides="holds if the cut reaches 40% (counted: no "
          "noise)", judge="buffers_resnet50", low=40.0, unit="%", about=HBM),
    Claim("sparsity_util", G, "TensorCore section",
          "structured sparsity with asynchronous pipelining pushes utilisation past 85%",
          "85%", "03",
          reading="the 2:4-sparse matmul's effective TFLOP/s (dense FLOPs counted) at 8192^3 "
          "fp16 as % of the card's dense datasheet peak (cuSPARSELt and CUTLASS pipeline their "
          "loads asynchronously)",
          other="% of the sparse peak (twice the dense) is shown beside; nvidia-smi's 'GPU "
          "utilisation' (time a kernel ran) is near 100% for any long kernel and decides nothing",
          method="the report's sparsity step",
          decides="holds if the share exceeds 85% within noise",
          judge="sparsity_util", low=85.0, unit="%", about=TC),
    # ---- mixed precision -------------------------------------------------------------------
    Claim("amp_speed", G, "mixed precision",
          "AMP (FP16 weights and activations, FP32 gradients, dynamic loss scaling) trains "
          "1.8-2.5x faster on ResNet-50 and similar models", "1.8-2.5x", "04",
          reading=f"training samples/s, {AMP}, over {DEFAULT_FP32}: ResNet-50 first, the "
          "GPT-2-small-shaped Transformer as a 'similar' model",
          other="against TF32 everywhere (how NVIDIA's own A100 tables compare mixed precision) "
          "shown beside",
          method="the report's amp step",
          decides="holds if every model measured reaches 1.8x within noise (the range's low "
          "end; above 2.5x the row says so)",
          judge="amp_speed", low=1.8, high=2.5, about=TC),
    Claim("accum_frequency", G, "mixed precision",
          "gradient accumulation lowers the communication frequency", "", "08",
          reading="all-reduce calls per training sample in DDP with 4 micro-batches per step: "
          "no_sync accumulation against synchronising every micro-batch, counted where DDP "
          "hands its buckets to torch.distributed",
          method="the report's ddp step", decides="holds if no_sync makes fewer all-reduce "
          "calls per sample (counted: no noise)", judge="accum_frequency", cpu_answers=True),
    # ---- scheduling ------------------------------------------------------------------------
    Claim("mps_k8s", G, "scheduling",
          "MPS and Kubernetes scheduling push cluster utilisation past 92% and make responses "
          "40% faster", "92%, 40%", "07",
          not_measurable="a cluster's utilisation and response time depend on its job mix and "
          "scheduler, which one box's report does not have; chapter 07 says what MPS shares and "
          "what it isolates"),
    Claim("placement", G, "scheduling",
          "embedding layers and Transformer layers placed on different units (the embedding "
          "on the CPU, the dense layers on the GPU)", "", "07",
          reading="samples/s and device memory of a training step with a large embedding table "
          "and dense layers (the lab's placement workload: an EmbeddingBag and an MLP, the case "
          "where a table's size makes placement a question), the table on the CPU against "
          "everything on the GPU",
          method="the report's placement step",
          decides="holds if the split is at least as fast as all-on-GPU within noise (the "
          "device memory it frees is shown)", judge="placement",
          about="PCIe transfers and GPU memory"),
    # ---- distributed -----------------------------------------------------------------------
    Claim("hierarchical", G, "distributed",
          "hierarchical AllReduce over NVLink cuts communication overhead by 40% or more",
          "40%+", "08",
          reading="the time of the lab's hierarchical all-reduce (reduce-scatter inside a group, "
          "all-reduce across groups, all-gather inside) against the flat all-reduce on the same "
          "ranks and message sizes; on one box the groups are its two halves, as two nodes "
          "would be",
          other="across real nodes NCCL already builds rings and trees over the hierarchy; one "
          "box cannot show that case",
          method="the report's hierarchical step",
          decides="holds if the time falls by at least 40% at the largest message within noise",
          judge="hierarchical", low=40.0, unit="%", about=LINKS),
    Claim("unit_util", G, "distributed",
          "FP16/FP32 compute units reach 92% utilisation", "92%", "03",
          reading="cuBLAS (torch.matmul) at 8192^3 in fp16 and in IEEE fp32, each as % of the "
          "card's dense datasheet peak for that precision",
          method="the report's peak step",
          decides="holds if both reach 92% within noise", judge="unit_util", low=92.0,
          unit="%", about=TC),
    Claim("unit_util_mfu", G, "distributed",
          "FP16/FP32 compute units reach 92% utilisation, read as a training step's", "92%",
          "12",
          reading=f"model FLOPs utilisation (MFU) of a training step, {AMP}, on {MODELS}: the "
          "model's forward and backward FLOPs per sample (counted by torch's FlopCounterMode) "
          "x samples/s, as % of the card's dense fp16 datasheet peak; the best model's",
          other="MFU against the fp16 matmul rate this report measured is shown beside, and "
          "every model's; a single matmul's share of the peak is the unit_util row. 92% is a "
          "kernel's figure: a whole step also runs normalisation, elementwise kernels, the "
          "optimizer and launch gaps, which add no FLOPs, and 40-60% MFU is a good training "
          "figure",
          method="the report's amp step (every training point carries its model FLOPs)",
          decides="holds if the best model's AMP step reaches 92% MFU within noise",
          judge="unit_util_mfu", low=92.0, unit="%", about=TC),
    Claim("nlp_speed_memory", G, "distributed",
          "a typical NLP model trains in 1/3 of the time with 28% less memory", "1/3, 28%",
          "04",
          reading=f"the GPT-2-small-shaped Transformer: step time and step peak memory, {AMP}, "
          f"against {DEFAULT_FP32}",
          other="bf16 autocast shown beside", method="the report's amp step",
          decides="holds if the step takes at most 1/3 of fp32's time within noise and its peak "
          "memory is at least 28% lower", judge="nlp_speed_memory", low=3.0,
          about=f"{TC} and {HBM}"),
    # ---- cost ------------------------------------------------------------------------------
    Claim("energy", G, "cost",
          "mixed precision and sparsity cut the per-card floating-point power by 18-22%",
          "18-22%", "10",
          reading="energy per TFLOP (NVML's energy counter over a metered run) of an 8192^3 "
          "fp16 2:4-sparse matmul against the same dense matmul in IEEE fp32, FLOPs counted "
          "dense for both",
          other="the card's mean power (W), the literal 'power', is shown beside (it can rise "
          "while the energy per FLOP falls), and fp16 dense",
          method="the report's energy step",
          decides="holds if the energy per TFLOP falls by at least 18% within noise (above 22% "
          "the row says so)", judge="energy", low=18.0, high=22.0, unit="%", about=ENERGY),
    Claim("accum_traffic", G, "cost",
          "gradient accumulation with micro-batch pipelining cuts cross-device traffic by 30% "
          "or more", "30%+", "08",
          reading="bytes one rank hands to all-reduce per training sample in DDP: no_sync "
          "accumulation (4 micro-batches, one sync) against synchronising every micro-batch",
          other="pipeline parallelism (the 'micro-batch pipelining') is not in the lab: the "
          "accumulation half only", method="the report's ddp step",
          decides="holds if the bytes per sample fall by at least 30% (counted: no noise)",
          judge="accum_traffic", low=30.0, unit="%", cpu_answers=True),
    Claim("elastic", G, "cost",
          "elastic scheduling raises utilisation by 40% or more", "40%+", "10",
          not_measurable="a cluster scheduler's effect on a job mix over time; one box's report "
          "has neither the scheduler nor the mix"),
    # ---- conclusion ------------------------------------------------------------------------
    Claim("overall", G, "conclusion",
          "the optimisations together give 3x or more throughput and about 30% lower peak "
          "memory", "3x+, ~30%", "04",
          reading=f"{AMP} against {DEFAULT_FP32} on {MODELS}: samples/s and step peak memory",
          other="the other levers (tiles, loading, communication) have rows of their own",
          method="the report's amp step",
          decides="holds if every model measured reaches 3x samples/s within noise and a 30% "
          "lower peak", judge="overall", low=3.0, about=f"{TC} and {HBM}"),
    # ---- FAQ -------------------------------------------------------------------------------
    Claim("embeddings_fp32", G, "FAQ",
          "layers with tiny gradient updates, such as embeddings, stay in FP32", "", "05",
          reading="the Transformer trained with its embedding tables stored in fp16 against "
          "fp32 (the rest fp32, the same steps and the preset's AdamW): the held-out loss "
          "reached, two data seeds each",
          other="with SGD the share of the table's updates an fp16 table loses (below half an "
          "ulp) is counted on the last step: the mechanism behind the advice",
          method="the report's embeddings step",
          decides="holds if fp16 tables reach a worse held-out loss than fp32 tables beyond "
          "the spread of the seeds (a diverged run counts as worse)",
          judge="embeddings_fp32", about="the real model's scale: the CPU preset is tiny and "
          "its learning rate large"),
    Claim("versions", G, "FAQ",
          "unified CUDA and framework versions give consistent TensorCore results", "", "09",
          not_measurable="consistency is between machines, not within one report: `report "
          "--compare A/ B/` (or `diff`) names every version difference and sets the figures side "
          "by side"),
    Claim("nccl_logs", G, "FAQ",
          "NCCL's logs show communication bottlenecks", "", "08",
          not_measurable="advice without a figure: NCCL_DEBUG=INFO (with "
          "NCCL_DEBUG_SUBSYS=INIT,GRAPH) prints the rings, trees and transports NCCL chose; "
          "`health` lists the NCCL variables set, and the busbw figures here are what to "
          "compare the logs with"),
    Claim("ecc_memory_clocks", G, "FAQ",
          "turn ECC on and run a memory stress test before raising memory clocks", "", "09",
          not_measurable="answered, not measured: an A800's or A100's HBM2e memory clock is "
          "fixed (nvidia-smi -q -d SUPPORTED_CLOCKS lists one memory clock), so there is none to "
          "raise; nvidia-smi has no memory stress test. Memory integrity is DCGM's (`dcgmi diag "
          "-r 3` on a drained GPU, memtest at -r 4); `health` reads ECC mode and counters, "
          "remapped rows and retired pages, and `health --stress` is a throughput check"),
    # ---- the second document ---------------------------------------------------------------
    Claim("accum_snippet", DOC2, "gradient accumulation",
          "gradient accumulation (the document's snippet) gives the large batch at the "
          "micro-batch's memory", "", "06",
          reading="the lab's loop (each micro-batch's loss / k, backward per micro-batch, one "
          "optimizer step) against one batch of k x b: gradient gap and step peak memory",
          other="the snippet as written is TensorFlow: it divides the loss by k, but takes a "
          "fresh GradientTape per micro-batch and applies only the last one's gradients, then "
          "calls a zero_grad() Keras optimizers do not have; its gap (one micro-batch's "
          "gradient / k) is measured beside",
          method="the report's accumulation step",
          decides="holds if the lab's loop matches the large batch's gradient within 1e-5 of "
          "its largest value with a lower peak (the snippet's own gap is shown)",
          judge="accum_snippet", cpu_answers=True),
    Claim("amp_trains", DOC2, "mixed precision",
          "AMP with GradScaler and autocast (the document's snippet) trains like fp32", "",
          "05",
          reading=f"held-out loss after the same steps, {AMP}, against {DEFAULT_FP32}, on the "
          "GPT-2-small-shaped Transformer; the scaler's skipped steps are shown",
          method="the report's amp step",
          decides="holds if AMP's held-out loss is within 2% of fp32's",
          judge="amp_trains", about="the GPU's autocast (CPU autocast casts other ops)"),
    Claim("workload_kinds", DOC2, "hardware choice",
          "CNNs want bandwidth, Transformers want capacity, GNNs want interconnect", "", "10",
          not_measurable="a rule of thumb without a figure or a configuration, and the lab has "
          "no GNN; what is measured instead: each model's memory per sample and samples/s "
          "(chapter 04) and the all-reduce bandwidth (chapter 08)"),
    Claim("windows_build", G, "FAQ",
          "Windows / MSBuild build settings", "", "09",
          not_measurable="build-tool advice for Windows; the lab targets Linux GPU servers, "
          "and a build setting is no performance figure"),
    # ---- customer cases --------------------------------------------------------------------
    case("case_speedup", stated="a customer case: 2.8x faster", figure="2.8x"),
    case("case_35_to_12", stated="a customer case: 35% -> 12%", figure="35% -> 12%"),
    case("case_23_to_9ms", stated="a customer case: 23 ms -> 9 ms", figure="23 -> 9 ms"),
    case("case_minus_27", stated="a customer case: -27%", figure="-27%"),
    case("case_minus_34", stated="a customer case: -34%", figure="-34%"),
    case("case_plus_41", stated="a customer case: +41%", figure="+41%"),
)
