"""What an encoder hands to a head: the last layer's output, and every layer's when the
head reads them (:class:`Features`), and the two ways a head takes them apart.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

__all__ = ["Features", "last_layer", "with_layers"]


class Features(NamedTuple):
    """What an encoder hands to a head.

    Attributes:
        last: the last layer's output, ``(..., d_hidden)``. This is ``h_t`` in every
            paper's notation.
        layers: all layer outputs, ``layers[0]`` the (dropped) input embedding and
            ``layers[-1]`` the same tensor as ``last``; empty when the encoder does not
            expose them.
    """

    last: Tensor
    layers: tuple[Tensor, ...] = ()


def with_layers(features: Tensor | Features, layers=None) -> Tensor | Features:
    """``features``, with the per-layer outputs ``layers`` attached when given (a
    :class:`Features`); a ValueError for layers given twice."""
    if layers is None:
        return features
    if isinstance(features, Features):
        raise ValueError("the layer outputs were given twice: pass a tensor with layers=, "
                         "or a Features, not both")
    return Features(features, tuple(layers))


def last_layer(features: Tensor | Features) -> Tensor:
    """The ``(..., d_hidden)`` tensor a single-layer head reads."""
    return features.last if isinstance(features, Features) else features
