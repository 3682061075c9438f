"""car-rag node postprocessors: supersession expansion and the active-status filter."""

from llama_index.postprocessor.car.active_filter import ActiveStatusFilter
from llama_index.postprocessor.car.expander import SupersessionExpander

__all__ = ["ActiveStatusFilter", "SupersessionExpander"]
