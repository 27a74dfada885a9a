"""matplotlib figures (Agg backend). Each function saves one PNG and returns its path."""

from attnlab.plotting import new_figure, save_figure

__all__ = ["new_figure", "save_figure"]
