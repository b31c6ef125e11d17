"""Charts as data: each function takes plain numbers and returns a plotly figure as a dict
(``{"data": [...], "layout": {...}}``) that the page hands to plotly.js unchanged.

No database, no Django, no plotly import: the figures are JSON-ready dicts, so a test
checks a chart by looking at its numbers, and selectors stay the only code that queries.

One module per kind of page: ``composition`` (what an artifact holds), ``runs``,
``lineage``, ``jobs``, ``annotations`` (an annotation's columns), ``recipe`` (the diversity
recipe of a pool or a schedule); ``common`` holds the palette, the layout and the labels
they share."""

from webapp.dashboard.charts.annotations import (
    clusters_figure,
    column_figure,
    filter_example,
    languages_figure,
)
from webapp.dashboard.charts.common import (
    MEASURES,
    PALETTE,
    TAINT,
    TOP_VALUES,
    colour_of,
    colours_of,
    human_number,
    log_ticks,
)
from webapp.dashboard.charts.composition import (
    composition_bars,
    composition_by_property,
    length_histogram,
    position_heatmap,
    predicted_epochs,
    schedule_composition,
    shuffle_comparison,
    window_deviation,
)
from webapp.dashboard.charts.jobs import (
    UNIT_STATE_COLOURS,
    unit_timeline,
)
from webapp.dashboard.charts.lineage import (
    LINEAGE_CHAR_PX,
    LINEAGE_KINDS,
    LINEAGE_MIN_HEIGHT,
    LINEAGE_PLOT_PX,
    LINEAGE_ROW_PX,
    lineage_graph,
    lineage_layout,
)
from webapp.dashboard.charts.recipe import recipe_card
from webapp.dashboard.charts.runs import (
    loss_curves,
    progress_by_step,
)

__all__ = [
    "LINEAGE_CHAR_PX",
    "LINEAGE_KINDS",
    "LINEAGE_MIN_HEIGHT",
    "LINEAGE_PLOT_PX",
    "LINEAGE_ROW_PX",
    "MEASURES",
    "PALETTE",
    "TAINT",
    "TOP_VALUES",
    "UNIT_STATE_COLOURS",
    "clusters_figure",
    "colour_of",
    "colours_of",
    "column_figure",
    "composition_bars",
    "composition_by_property",
    "filter_example",
    "human_number",
    "languages_figure",
    "length_histogram",
    "lineage_graph",
    "lineage_layout",
    "log_ticks",
    "loss_curves",
    "position_heatmap",
    "predicted_epochs",
    "progress_by_step",
    "recipe_card",
    "schedule_composition",
    "shuffle_comparison",
    "unit_timeline",
    "window_deviation",
]
