"""Which links of a torus a collective's group can drive (pure core).

A collective over a group of chips on a torus runs a ring along each torus axis the group spans, in
both directions where the axis closes into a ring: each spanned axis adds two links of bandwidth if it
wraps around and one if it is a line (the edge chip receives everything over its one inward link).
So the bandwidth a group gets is not the chip's whole port count: a tensor-parallel group of 4 chips
on a TPU v5p slice lies along one axis of its 4x4x4 torus and drives 2 of the chip's 6 links. Source:
"How to Scale Your Model" (the scaling book), sharding chapter: an AllGather over one axis costs
``V / W_bidirectional``, over ``n_axes`` axes ``V / (W_bidirectional * n_axes)``, and a TPU v5e
sub-slice axis without wraparound "can't do a fully bidirectional AllGather" (its measured 680 us
against 377 us bidirectional and 560 us one-way,
https://github.com/jax-ml/scaling-book/blob/0819a7d8c55ddc113f5cba0285a5f97380cac1e3/sharding.md).

Three facts place a group on the torus:

* the slice's shape: a TPU slice of ``2**k`` chips is a torus whose axes are powers of two, as
  balanced as they can be (v5p: 4x4x4 for 64 chips, 4x4x8 for 128, 8x8x8 for 512; v5e and v6e: 2x4
  for 8, 16x16 for 256; the Cloud TPU topology tables). Another count is not a standard slice, and
  is priced as before (the group spans every axis, all of them wrapping);
* which physical axes each parallel axis takes: JAX's ``mesh_utils.create_device_mesh`` assigns the
  logical axes from the most network-intensive one (tensor parallelism, the innermost here) outwards,
  each to the largest number of whole remaining physical axes whose lengths multiply to its size
  (``_create_device_mesh_for_nd_torus``, https://github.com/jax-ml/jax/blob/6d876ed6437c4f3bc32e1a8a3e97bbfd4c0ae1cf/jax/experimental/mesh_utils.py).
  The axes inside a group's (``stride``, the product of their sizes) are placed first, as one; a
  size no subset of whole axes gives is laid out over whole axes and a segment of one more (a
  segment is a line);
* whether an axis wraps: the link's ``wraparound_chips`` (an axis whose length is a multiple of it
  closes into a ring) and ``wraparound_whole_slice`` (the rings are closed by switches that join
  whole cubes, so a slice wraps only when every axis does: TPU v4 and v5p). Without either, every
  axis wraps.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from perfmodel.hardware.model import Link

TORUS_DIMENSIONS = {"torus2d": 2, "torus3d": 3}
LINKS_PER_RING_AXIS = 2  # both directions of a ring: one link to each neighbour
LINKS_PER_LINE_AXIS = 1  # a line's edge chip takes everything over its one inward link


@dataclass(frozen=True, kw_only=True)
class AxisSpan:
    """One torus axis a group spans: the chips of the group along it, and whether they form a ring."""

    chips: int
    ring: bool


def _power_of_two(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def slice_shape(chips: int, dimensions: int) -> tuple[int, ...] | None:
    """The torus shape of a standard slice of ``chips`` chips over ``dimensions`` axes, shortest axis
    first: powers of two as balanced as they can be; None for a chip count that is not a power of two."""
    if dimensions < 1 or not _power_of_two(chips):
        return None
    exponent = chips.bit_length() - 1
    base, extra = divmod(exponent, dimensions)
    return tuple(2 ** (base + (1 if axis >= dimensions - extra else 0)) for axis in range(dimensions))


def _take(free: list[int], size: int) -> tuple[list[int], int] | None:
    """JAX's rule for one logical axis: the most whole free axes (indices) whose lengths multiply to
    ``size``; None when no subset does. Returns the indices and 0 (no partial axis)."""
    open_axes = [index for index, length in enumerate(free) if length > 1]
    for count in range(len(open_axes), 0, -1):
        for chosen in itertools.combinations(open_axes, count):
            if math.prod(free[index] for index in chosen) == size:
                return list(chosen), 0
    return None


def _take_splitting(free: list[int], size: int) -> tuple[list[int], int]:
    """A size no subset of whole axes gives: whole free axes, longest first, while they divide it, and a
    segment of the next one for the rest (the returned partial length; 0 when none is needed)."""
    chosen, left = [], size
    for index in sorted((i for i, length in enumerate(free) if length > 1), key=lambda i: -free[i]):
        if left <= 1:
            break
        if left % free[index] == 0:
            chosen.append(index)
            left //= free[index]
    if left <= 1:
        return chosen, 0
    rest = [i for i, length in enumerate(free) if length >= left and i not in chosen]
    if not rest:
        return chosen, left  # more chips than the free axes hold: priced as a segment anyway
    chosen.append(min(rest, key=lambda i: free[i]))
    return chosen, left


def _place(free: list[int], size: int) -> tuple[list[int], int]:
    exact = _take(free, size) if size > 1 else ([], 0)
    return exact if exact is not None else _take_splitting(free, size)


def _wraps(link: Link, length: int, shape: tuple[int, ...]) -> bool:
    rule = link.wraparound_chips
    if rule is None:
        return True
    if link.wraparound_whole_slice:
        return all(axis % rule == 0 for axis in shape)
    return length % rule == 0


def group_span(link: Link, group: int, stride: int = 1, slice_chips: int | None = None) -> tuple[AxisSpan, ...] | None:
    """The torus axes a group of ``group`` chips, ``stride`` apart, spans in a slice of ``slice_chips``
    chips (default: the group and the axes inside it are the whole slice); None when ``link`` is not a
    torus or the slice is not a standard one (see the module docstring)."""
    dimensions = TORUS_DIMENSIONS.get(link.topology)
    if dimensions is None or group <= 1:
        return None
    chips = max(slice_chips or 0, group * stride)
    shape = slice_shape(chips, dimensions)
    if shape is None or not _power_of_two(group) or not _power_of_two(stride):
        return None
    free = list(shape)
    inner, partial = _place(free, stride) if stride > 1 else ([], 0)
    for index in inner:
        free[index] = 1
    if partial:  # the inner axes left a segment of an axis: the group continues along that axis
        index = inner[-1]
        free[index] = shape[index] // partial
    chosen, partial = _place(free, group)
    spans = []
    for position, index in enumerate(chosen):
        whole = not (partial and position == len(chosen) - 1)
        length = free[index] if whole else partial
        ring = whole and length == shape[index] and _wraps(link, shape[index], shape)
        spans.append(AxisSpan(chips=length, ring=ring))
    return tuple(spans)


def ring_links(link: Link, spans: tuple[AxisSpan, ...]) -> int:
    """Links a chip drives in a collective over ``spans``: two per ring axis, one per line axis, at most
    the chip's ports."""
    links = sum(LINKS_PER_RING_AXIS if span.ring else LINKS_PER_LINE_AXIS for span in spans if span.chips > 1)
    return max(min(link.links_per_chip, links), 1)


def span_steps(spans: tuple[AxisSpan, ...]) -> int:
    """Latency-bound steps of one phase over ``spans``: ``chips - 1`` along each axis (a ring per
    dimension, as the torus formula ``d (p**(1/d) - 1)`` counts a whole balanced torus)."""
    return max(sum(span.chips - 1 for span in spans), 1)
