"""ipywidgets panels: thin views over the lab's workloads that run work only from a Run
button (or `panel.run(wait=True, ...)`) and draw with a800lab.figures.

    from a800lab.widgets import Explorer, Range
    Explorer(my_step, params={"batch_size": Range(1, 256, default=32), "precision": ["fp32"]})
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
