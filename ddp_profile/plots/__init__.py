"""Plot functions: each takes DataFrames (the frames of :mod:`ddp_profile.schema`) and returns a
``plotly.graph_objects.Figure``, so the same figures work in a notebook and in the HTML report.
plotly is imported here and in :mod:`ddp_profile.report` only; nothing here writes files.

Every figure's title ends with a *source* line (GPU, model, dtype, steps) built by :func:`describe_source`,
so a screenshot of one figure still says what it was measured on.
"""

from ddp_profile.plots.compare import overlap_picture, strategy_bars
from ddp_profile.plots.figure_parts import describe_source
from ddp_profile.plots.steps import exposed_comm_figure, step_breakdown
from ddp_profile.plots.sweep import alpha_beta_figure, bucket_sweep_figure
from ddp_profile.plots.timeline import timeline_figure, timeline_steps

__all__ = [
    "describe_source",
    "timeline_figure",
    "timeline_steps",
    "step_breakdown",
    "exposed_comm_figure",
    "strategy_bars",
    "overlap_picture",
    "bucket_sweep_figure",
    "alpha_beta_figure",
]
