"""Models: the small pre-LN transformer used on the BB task, with named hook points."""

from attnlab.models.toy import ToyConfig, ToyTransformer

__all__ = ["ToyConfig", "ToyTransformer"]
