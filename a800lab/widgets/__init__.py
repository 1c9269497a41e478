"""ipywidgets panels: thin views over the core objects (a800lab.core, a800lab.workloads); they
run work only from a Run button and plot with a800lab.figures.sweep.

    from a800lab.widgets import Explorer, Range
    Explorer(my_step, params={"batch_size": Range(1, 256, default=32), "precision": ["fp32"]})
    MatmulExplorer()        # tile heatmap, shape sweep with the quantisation model, precisions
    TrainingExplorer()      # batch x accumulation x precision: samples/s, memory, loss, max batch
    PipelineExplorer()      # loader workers, pinned memory, copies: samples/s, idle, timeline
    ServingExplorer()       # inference p50/p99 vs samples/s, decode, streams, tune under a p99
    CommExplorer()          # collectives (busbw), DDP comm hooks, no_sync, buckets on N ranks
    CostExplorer("train")   # samples/s, energy per sample, cost per million samples
    DiffPanel(a, b)         # two machines' results or doctor reports: what differs, B / A
    ReportPanel()           # `a800lab report`: the guide's claims tested here, report inline
"""

from .comm_explorer import CommExplorer
from .cost_explorer import CostExplorer
from .device_panel import DevicePanel
from .diff_panel import DiffPanel
from .explorer import Explorer
from .matmul_explorer import MatmulExplorer
from .params import Choice, Fixed, Range
from .pipeline_explorer import PipelineExplorer
from .report_panel import ReportPanel
from .serving_explorer import ServingExplorer
from .training_explorer import TrainingExplorer

__all__ = ["Choice", "CommExplorer", "CostExplorer", "DevicePanel", "DiffPanel", "Explorer",
           "Fixed", "MatmulExplorer", "PipelineExplorer", "Range", "ReportPanel",
           "ServingExplorer", "TrainingExplorer"]
