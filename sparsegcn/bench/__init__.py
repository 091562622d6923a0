"""Benchmarks of the propagation backends: the library behind ``sparsegcn bench``.

=============  ====================================================
module         holds
=============  ====================================================
``graphs``     random and community (SBM) graphs, per-variant forms
``timing``     compile apart, warm up, ``block_until_ready``, medians
``runner``     the case matrix, the report, crossovers, the table
``plot``       the log-log plot (matplotlib imported lazily)
``steps``      full GCN training steps (Cora, arxiv-sized) to time
=============  ====================================================
"""

from sparsegcn.bench.graphs import (
    ALL_VARIANTS,
    EXTRA_VARIANTS,
    GRAPH_KINDS,
    VARIANTS,
    make_graph,
    propagation_graph,
)
from sparsegcn.bench.plot import plot_report
from sparsegcn.bench.runner import (
    PRESETS,
    Case,
    Matrix,
    crossovers,
    format_table,
    machine_info,
    run_matrix,
)
from sparsegcn.bench.timing import Timing, measure, stream_bandwidth, stream_kernel

__all__ = [
    "ALL_VARIANTS",
    "EXTRA_VARIANTS",
    "GRAPH_KINDS",
    "PRESETS",
    "VARIANTS",
    "Case",
    "Matrix",
    "Timing",
    "crossovers",
    "format_table",
    "machine_info",
    "make_graph",
    "measure",
    "plot_report",
    "propagation_graph",
    "run_matrix",
    "stream_bandwidth",
    "stream_kernel",
]
