"""The claims documentation decides (the document and section named: the same on every
machine), the claims nothing measures (and why), and the guide's sentences that hold no claim."""

from .claims import AGREES, CONTRADICTED, PARTLY, Claim, Doc, Reading

K8S_GPUS = ("Kubernetes documentation", "Schedule GPUs",
            "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/")
MPS = ("NVIDIA Multi-Process Service documentation", "Volta MPS; Error Containment; "
       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "https://docs.nvidia.com/deploy/mps/index.html")
CTK = ("NVIDIA Container Toolkit documentation", "Overview; Architecture Overview",
       "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
       "arch-overview.html")
CTK_README = ("NVIDIA Container Toolkit README", "Getting Started",
              "https://github.com/NVIDIA/nvidia-container-toolkit")
NVSMI = ("nvidia-smi(1) manual page", "topo: -m, the GPUDirect communication matrix and its "
         "legend (NV#, PIX, PXB, PHB, NODE, SYS)", "https://docs.nvidia.com/deploy/nvidia-smi/")
FABRIC = ("NVIDIA Fabric Manager user guide", "Overview (NVLink, NVSwitch)",
          "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide")
NCCL_DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/"
NCCL_LOG = ("NCCL user guide", "Troubleshooting: Logging (NCCL_DEBUG, NCCL_DEBUG_SUBSYS)",
            NCCL_DOCS + "troubleshooting/logging.html")
NCCL_OVERVIEW = ("NCCL user guide", "Overview of NCCL", NCCL_DOCS + "overview.html")
NCCL_ENV = ("NCCL user guide", "Environment Variables: NCCL_SHM_DISABLE", NCCL_DOCS + "env.html")
AMP_DOC = ("PyTorch documentation", "Automatic Mixed Precision package - torch.amp: "
           "Autocasting, Gradient Scaling", "https://docs.pytorch.org/docs/stable/amp.html")
DDP_DOC = ("PyTorch documentation", "torch.nn.parallel.DistributedDataParallel",
           "https://docs.pytorch.org/docs/stable/generated/"
           "torch.nn.parallel.DistributedDataParallel.html")
CASE = ("a customer's workload, cluster and before/after configuration the guide does not "
        "give: there is nothing to rerun")


def _doc(id_, cites, stated, chapter, verdict, finding, *sources, readings=()) -> Claim:
    return Claim(id_, cites, stated, chapter, readings=readings, doc=Doc(verdict, finding,
                                                                         sources))


def _none(id_, cites, stated, chapter, why, figure="") -> Claim:
    return Claim(id_, cites, stated, chapter, figure=figure, not_measurable=why)


DOCUMENTED: tuple[Claim, ...] = (
    _none("deploy_complexity", ("G.1.5",), "Deployment strategy … Containerized packaging/"
          "dynamic resource allocation … Deployment complexity reduced by 30%", "09",
          "'complexity' has no unit the guide defines and no before/after is given; what is "
          "checkable is that deployments are the same: chapter 09's container, Kubernetes and "
          "Slurm recipes write doctor.json, and `diff` names every difference", "30%"),
    _doc("numa_binding", ("G.2.2", "D.4.3"), "giving priority to slot positions within a NUMA "
         "domain that have sufficient PCIe lane bandwidth, to avoid the latency loss brought by "
         "cross-node communication … A NUMA-bound multi-card configuration is recommended", "01",
         AGREES, "PyTorch's NUMA binding page: 'accessing memory on remote NUMA nodes incurs "
         "additional latency'; binding each worker to the CPUs of its GPU's NUMA node 'typically "
         "results in 1-10% overall performance improvements' (torchrun --numa-binding); NVIDIA's "
         "gpu_affinity sets the same affinity and says it usually improves and stabilises "
         "performance. Chapter 01 shows each GPU's NUMA node and the binding commands",
         ("PyTorch documentation", "NUMA Binding (torch.distributed.run --numa-binding)",
          "https://docs.pytorch.org/docs/main/elastic/numa.html"),
         ("NVIDIA gpu_affinity", "README", "https://github.com/NVIDIA/gpu_affinity"),
         readings=(Reading("NUMA nodes", "crossing NUMA nodes: the only node a slot inside one "
                           "server can keep traffic within", literal=True),
                   Reading("server nodes", "crossing servers: traffic between servers does not "
                           "depend on a slot inside one (that is G.7.2's row, hierarchical)"))),
    _doc("container_packaging", ("G.2.3",), "a containerized deployment solution is recommended "
         "to package the CUDA runtime libraries and driver dependencies", "09", PARTLY,
         "an image packages the CUDA runtime and the framework's libraries (NGC images do), but "
         "not the driver: 'you do not need to install the CUDA Toolkit on the host system, but "
         "the NVIDIA driver needs to be installed', and the toolkit's runtime hook mounts the "
         "host driver's user-mode libraries into the container when it starts", CTK_README, CTK),
    _doc("topo_view", ("G.2.4", "D.4.2"), "use the nvidia-smi topo -m command to visualize the "
         "GPU interconnect topology, and to assign physically adjacent accelerator cards to "
         "multi-card parallel tasks … Use nvidia-smi topo -m to view how the GPUs are connected",
         "01", AGREES, "`nvidia-smi topo -m` prints the matrix of how each pair of GPUs (and "
         "NICs) connects, with CPU and NUMA affinity; an NV# pair talks over NVLink, a SYS pair "
         "crosses the inter-socket link. On an NVSwitch board (HGX A100/A800) every pair is NV#: "
         "there is no closer pair to choose. `python -m a800lab doctor` prints the same matrix",
         NVSMI, FABRIC),
    _doc("gpu_allocation", ("G.2.5",), "combined with Kubernetes device plugins or the Slurm job "
         "scheduling system, to dynamically allocate GPU memory and compute resources "
         "according to the compute density of the training tasks", "09", PARTLY,
         "Kubernetes allocates GPUs as whole devices ('GPUs are only supposed to be specified in "
         "the limits section'; requests and limits must be equal): there is no GPU-memory "
         "request, and sharing comes as fixed MIG slices or time-slicing; Slurm's GRES can give "
         "a job a share of a GPU through MPS (mps:N), fixed at submission. Neither adjusts "
         "memory and compute to a task's compute density as it runs", K8S_GPUS,
         ("Slurm documentation", "gres.conf(5): MPS", "https://slurm.schedmd.com/gres.conf.html"
          )),
    _doc("nccl_library", ("G.2.6",), "By preloading shared-memory libraries (such as NCCL)",
         "08", CONTRADICTED, "NCCL is a communication library ('a library providing "
         "inter-GPU communication primitives that are topology-aware', over PCIe, NVLink, "
         "NVSwitch and networks); shared memory is one of its transports: 'SHM is used "
         "between devices when peer-to-peer cannot happen' (NCCL_SHM_DISABLE). It is loaded as a "
         "shared library (libnccl.so) like any other: the second reading agrees, and preloading "
         "changes start-up, not bandwidth", NCCL_OVERVIEW, NCCL_ENV,
         readings=(Reading("shared-memory library", "NCCL as a library of shared memory",
                           literal=True),
                   Reading("shared library", "NCCL as a shared library (.so): agrees"))),
    _none("linear_scaling", ("G.2.6",), "optimizing the process-binding strategy, a linear "
          "scaling-efficiency improvement can be achieved in multi-machine multi-card scenarios",
          "08", "no figure and no baseline: 'a linear improvement' of an efficiency across "
          "machines needs two or more nodes, and neither reading (linear-scaling efficiency or a "
          "linear improvement of it) names what it is measured against; on one box chapter 08 "
          "measures busbw over message sizes"),
    _doc("framework_tuning", ("G.3.5",), "the thread-synchronization strategy and the "
         "shared-memory allocation ratio need to be adjusted specifically according to the "
         "characteristics of the underlying operator implementations of PyTorch or TensorFlow",
         "02", PARTLY, "the shared-memory share of an SM (the carveout) is an attribute each "
         "kernel's author sets (cudaFuncAttributePreferredSharedMemoryCarveout, 'only a hint') "
         "and thread synchronisation is inside the kernel: PyTorch and TensorFlow set both in "
         "their own kernels and give users no such setting. That the framework's API choices "
         "change the result agrees (chapter 12 measures the levers a user has); in a Triton "
         "kernel of your own, num_stages sets the shared memory (chapter 02)",
         ("CUDA Runtime API", "cudaFuncSetAttribute: "
          "cudaFuncAttributePreferredSharedMemoryCarveout",
          "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EXECUTION.html"),
         ("NVIDIA Ampere tuning guide", "Shared memory (the carveout)",
          "https://docs.nvidia.com/cuda/ampere-tuning-guide/index.html")),
    _doc("amp_recipe", ("G.4.2",), "store weight parameters and activations in FP16, while "
         "gradient computation still retains FP32 precision, avoiding the gradient underflow "
         "problem caused by insufficient numerical range", "05", PARTLY,
         "in PyTorch AMP the weights stay FP32 (autocast casts them per op: 'You should not "
         "call half() or bfloat16() on your model(s) or inputs when using autocasting'), FP16 "
         "ops' backward runs in FP16 ('Backward ops run in the same type that autocast used for "
         "corresponding forward ops'), and underflow is "
         "avoided by scaling the loss (GradScaler), not by computing gradients in FP32. Dynamic "
         "loss scaling and framework-level AMP, the second and third solutions, are as "
         "described", AMP_DOC),
    _doc("mps_isolation", ("G.5.6", "G.11.1", "G.11.2"), "by integrating NVIDIA MPS "
         "(Multi-Process Service) or Kubernetes extension plugins, resource isolation and load "
         "balancing among multiple tasks can be achieved … combined with the CUDA MPS "
         "multi-process service mechanism, isolated allocation of GPU memory and compute needs "
         "to be achieved", "01", PARTLY, "since Volta each MPS client has its own GPU address "
         "space and can be limited in SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and pinned device "
         "memory (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), but a fatal GPU exception in one client is "
         "reported to every client sharing the GPU, and memory bandwidth and caches stay shared: "
         "limits, not isolation. MIG isolates (chapter 01)", MPS,
         ("NVIDIA MIG user guide", "Supported MIG Profiles",
          "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html")),
    _none("mps_k8s", ("G.5.6",), "measurements show that this solution can raise the resource "
          "utilization of an A800 cluster to above 92% and improve average task response speed "
          "by 40%", "07", "a cluster's utilisation and response time depend on its job mix "
          "and scheduler, which one box's report does not have; chapter 07 says what MPS shares "
          "and what it isolates", "92%, 40%"),
    _doc("container_toolkit", ("G.6.3",), "integrating the NVIDIA Container Toolkit to support "
         "GPU virtualization, ensuring consistency of the environment across different "
         "platforms", "09", PARTLY, "the toolkit lets containers use the host's GPUs (a runtime "
         "hook that mounts the devices and the driver's libraries); it does not virtualise a "
         "GPU (that is NVIDIA vGPU, a separate product). The image makes the user space "
         "consistent across platforms; the driver stays the host's", CTK, CTK_README),
    _doc("cuda_libraries", ("G.6.5",), "the CUDA library of the corresponding version needs to "
         "be loaded dynamically through environment variables, combined with conda virtual "
         "environments to isolate dependency conflicts", "09", PARTLY, "TensorFlow documented "
         "exactly this recipe for its 2.12 and 2.13 releases: 'conda install -c conda-forge "
         "cudatoolkit=11.8.0', then 'export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CONDA_PREFIX/lib/' "
         "in a conda environment (its activate.d script sets it on every activation); for its "
         "GPU releases from 2.14 the page installs 'tensorflow[and-cuda]', whose CUDA libraries "
         "come as pip packages and need no variable. PyTorch installs one build per CUDA version "
         "(the 'Compute Platform' of its install command, e.g. --index-url .../whl/cu126) with "
         "its CUDA libraries inside: the version is chosen when installing. Separate "
         "environments (conda or venv) keeping builds apart agrees; loading by variable is "
         "what older TensorFlow needed, not what current releases do. `python -m a800lab "
         "doctor` prints the CUDA and cuDNN versions torch loaded",
         ("TensorFlow install guide, 2.12 (tensorflow/docs at 518478e)",
          "Install TensorFlow with pip: Linux, GPU (conda cudatoolkit and LD_LIBRARY_PATH)",
          "https://github.com/tensorflow/docs/blob/518478ecc/site/en/install/pip.md"),
         ("TensorFlow install guide", "Install TensorFlow with pip (tensorflow[and-cuda])",
          "https://www.tensorflow.org/install/pip"),
         ("PyTorch", "Get Started: Start Locally (Compute Platform)",
          "https://pytorch.org/get-started/locally/")),
    _doc("node_labels", ("G.6.6",), "matching A800 devices through node labels to ensure that "
         "computing tasks are allocated precisely", "09", AGREES, "with different GPU types "
         "in one cluster, 'you can use Node Labels and Node Selectors to schedule pods to "
         "appropriate nodes' (labelled by hand or by Node Feature Discovery)", K8S_GPUS),
    _doc("windows_build", ("G.6.8",), "In a Windows environment, OpenCL kernel code can be "
         "compiled in a customized way through MSBuild; on Linux systems, by contrast, the "
         "thread-parallel configuration of GCC/LLVM needs to be optimized, releasing multi-card "
         "parallel potential to the maximum", "09", PARTLY, "the Windows half agrees: Intel's "
         "Code Builder plug-in compiles OpenCL kernels inside a Visual Studio (MSBuild) build "
         "('When building solution, Intel Code Builder for OpenCL API plug-in automatically "
         "builds attached OpenCL kernels', with build options and a target device per project), "
         "for Intel CPUs and graphics; elsewhere the OpenCL implementation compiles a program "
         "when it runs (clBuildProgram), and NVIDIA's does so for its GPUs. The Linux half does "
         "not: GPU kernels of CUDA code are compiled by nvcc's device compiler, and the host "
         "compiler (GCC, Clang, MSVC) compiles only the host code, so its thread settings touch "
         "no GPU kernel and release no multi-card parallelism",
         ("Intel SDK for OpenCL Applications developer guide (2017)",
          "Building an OpenCL Project (Visual Studio plug-in)",
          "https://www.intel.com/content/www/us/en/docs/opencl-sdk/developer-guide/2017/"
          "building-an-opencl-project.html"),
         ("Khronos OpenCL API specification", "clBuildProgram",
          "https://registry.khronos.org/OpenCL/sdk/latest/docs/man/html/clBuildProgram.html"),
         ("NVIDIA CUDA Compiler Driver NVCC", "Introduction: CUDA compilation trajectory",
          "https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/index.html")),
    _doc("k8s_priority", ("G.7.4",), "it is recommended to adopt an elastic resource scheduling "
         "strategy that dynamically allocates the computing resources of the A800 cluster based "
         "on task priority, combined with orchestration tools such as Kubernetes to achieve "
         "fine-grained load balancing", "09", PARTLY, "allocation by task priority agrees: in "
         "Kubernetes 'Pods can have priority', and 'If a Pod cannot be scheduled, the scheduler "
         "tries to preempt (evict) lower priority Pods to make scheduling of the pending Pod "
         "possible' (a PriorityClass per task). The grain does not: Kubernetes allocates GPUs as "
         "whole devices ('GPUs are only supposed to be specified in the limits section'), or as "
         "the fixed MIG slices or time-slices its device plugin advertises; it neither splits a "
         "GPU by load nor resizes a running job (elastic training is the job's own launcher, e.g. "
         "torchrun's rendezvous). The same kind of claim as G.2.5's",
         ("Kubernetes documentation", "Pod Priority and Preemption",
          "https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/"),
         K8S_GPUS),
    _none("elastic", ("G.8.3",), "dynamically migrating idle A800 compute to other training "
          "clusters through containerization technology can raise overall resource "
          "utilization by more than 40%", "10", "a cluster scheduler's effect on a job mix over "
          "time; one box's report has neither the scheduler nor the mix (and the 40% may be "
          "relative or in points)", "40%+"),
    _none("case_manufacturing", ("G.9.2",), "model training efficiency increased 2.8x, and at "
          "the same time, using heterogeneous computing resource pooling technology, the GPU "
          "idle rate was lowered from 35% to 12%", "10", CASE, "2.8x, 35% -> 12%"),
    _none("case_ads", ("G.9.4",), "overall hardware investment was reduced by 34%, while peak "
          "QPS (queries per second) rose by 41%", "10", CASE, "-34%, +41%"),
    _doc("versions", ("G.6.2", "G.11.5", "G.11.6"), "a unified base environment must first be "
         "configured, including standardized installation of the CUDA Toolkit version and the "
         "drivers … The CUDA version and the underlying compute "
         "libraries of the deep-learning framework need to be unified, and verification by "
         "instruction-level performance analysis carried out with the NSight Compute tool",
         "09", AGREES, "Nsight Compute profiles kernels down to the instruction (its Source page "
         "shows SASS with per-instruction metrics); comparing two machines needs the same CUDA and "
         "library versions, which `report --compare A/ B/` and `diff` list field by field",
         ("NVIDIA Nsight Compute documentation", "Profiling Guide: Source page",
          "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html")),
    _doc("nccl_logs", ("G.11.7", "G.11.8"), "The NCCL backend logs can be used to analyse the "
         "communication topology", "08", AGREES, "NCCL_DEBUG=INFO (with NCCL_DEBUG_SUBSYS, e.g. "
         "INIT,GRAPH) logs 'the choices NCCL makes during execution (such as algorithm "
         "selection, topology detection, and network configuration)'; that compression cuts "
         "the bytes sent is measured by the compression row", NCCL_LOG),
    _doc("ecc_memory_clocks", ("G.11.9", "G.11.10"), "it is recommended to run a GPU memory "
         "stress test with the NVIDIA-smi tool", "09", CONTRADICTED, "nvidia-smi reads and sets "
         "ECC mode and clocks (-q -d SUPPORTED_CLOCKS lists the memory clocks a card allows) but "
         "has no memory stress test; NVIDIA's memory test is DCGM's diagnostics (dcgmi diag -r 3, "
         "memtest at level 4). `health` reads ECC counters, remapped rows and retired pages",
         ("nvidia-smi(1) manual page", "-q -d SUPPORTED_CLOCKS; -e (ECC mode)",
          "https://docs.nvidia.com/deploy/nvidia-smi/"),
         ("NVIDIA DCGM documentation", "dcgmi diag; Memtest Diagnostic",
          "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html")),
    _doc("nvlink_sockets", ("D.4.4",), "GPU communication across CPU sockets needs NVLink to "
         "be enabled", "01", PARTLY, "NVLink is 'a direct GPU-to-GPU interconnect', so GPUs on "
         "different sockets that share it (NVSwitch on HGX boards, bridges on PCIe pairs) talk "
         "without the CPUs; without it they still communicate over PCIe and the inter-socket "
         "link (SYS in nvidia-smi topo -m), slower. NVLink is hardware, not a setting to "
         "enable", FABRIC, NVSMI),
    _none("workload_kinds", ("D.5.1",), "CNN-type models value GPU memory bandwidth more, "
          "Transformer needs large GPU memory capacity, and graph neural networks depend on "
          "high interconnect bandwidth", "10", "a rule of thumb without a figure or a "
          "configuration, and the lab has no GNN; what is measured instead: each model's memory "
          "per sample and samples/s (chapter 04) and the all-reduce bandwidth (chapter 08)"),
    _doc("ps_vs_allreduce", ("D.5.3", "D.5.4"), "Single-machine multi-card suits the "
         "parameter-server architecture … Multi-node suits the AllReduce communication "
         "pattern", "08", PARTLY, "multi-node data parallelism with all-reduce is what "
         "DistributedDataParallel does (agrees); on one machine PyTorch recommends it too: "
         "'DistributedDataParallel is proven to be significantly faster than "
         "torch.nn.DataParallel [whose replicas gather on one GPU] for single-node multi-GPU "
         "data parallel training'", DDP_DOC),
    _doc("memory_first", ("D.5.5",), "It is recommended to first meet the single-card GPU "
         "memory requirement and then scale out to more nodes", "06", AGREES, "data parallelism "
         "works 'by synchronizing gradients across each model replica': every rank holds the "
         "whole model, so more nodes add throughput, not memory per model, and the model must "
         "fit one card first. Sharded data parallelism is the exception that proves it: FSDP is "
         "'A wrapper for sharding module parameters across data parallel workers'. `python -m "
         "a800lab tune train` finds the largest micro-batch that fits", DDP_DOC,
         ("PyTorch documentation", "FullyShardedDataParallel",
          "https://docs.pytorch.org/docs/stable/fsdp.html")),
)

FRAMING = "frames the article or a section; asserts nothing checkable"
NO_CLAIM: dict[str, str] = {
    **dict.fromkeys(("G.1.1", "G.1.2", "G.1.3", "G.2.1", "G.6.1", "G.6.7", "G.7.1", "G.8.1",
                     "G.9.1", "G.10.1", "G.5.1"), FRAMING),
    "G.5.2": "describes what a scheduler may do, without a figure or a configuration",
    "G.5.3": "advice for a scheduling framework (support FP16/FP32, watch GPU memory), nothing "
             "checkable",
    "G.5.4": "advice (priority queues, graph splitting) without a figure",
    "G.5.7": "advice on adapting a scheduler across frameworks",
    "G.6.4": "advice: handle framework dependencies first",
    "G.6.9": "a conclusion without a figure",
    "G.8.2": "advice (workload-predicting elastic scheduling) without a figure",
    "G.9.5": "a conclusion about the cases above",
    **dict.fromkeys(("G.10.2", "G.10.3"), "a conclusion without a figure"),
    "D.0.1": "about the article itself (its length and reading time)",
    "D.0.2": "a general statement about accelerator cards, without a figure",
    "D.0.3": "a general statement, without a figure",
    "D.1.1": "a note on a comparison table the text does not include",
    "D.4.1": "a list heading (its items are D.4.2-D.4.4)",
    "D.5.2": "a list heading (its items are D.5.3-D.5.5)",
    "D.5.6": "a general conclusion, without a figure",
    "D.5.7": "advice the lab follows: measure throughput under each configuration",
}
