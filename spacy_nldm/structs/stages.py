"""The stages of the inside pass, generic in the semiring: incomplete items of one width, complete
items of one width, and (with max_dist) the right-complete spans of one start row."""
from typing import Optional

import torch

from .arcs import ArcScores
from .charts import Charts
from .semiring import LogSemiring

Tensor = torch.Tensor


def _incomplete_stage(semiring, bands: dict, shifts: dict, arcs: ArcScores, w: int, arc_values=None) -> dict:
    """IR and IL of one width: inner(i, j, a, c) = (+)_{r=i..j-1} CR[i, r, a] * CL[r+1, j, c], plus the arc."""
    operands = (bands["cr"].transpose(2, 3).unsqueeze(-1), shifts["cr"], bands["cl"].unsqueeze(3), shifts["cl"])
    if semiring is LogSemiring and arc_values is None:
        items = _incomplete_in_exp_space(operands, arcs, w)
        if items is not None:
            return items
    inner = semiring.contract(*operands)  # (B, S, M, M)
    arc_right, arc_left = arc_values or arcs.width(w)
    return {"inc_right": inner + arc_right, "inc_left": inner + arc_left}


def _incomplete_in_exp_space(operands: tuple, arcs: ArcScores, w: int) -> Optional[dict]:
    """The log semiring's incomplete items, already encoded as (value, shift): inner * exp(arc) is
    formed in exp space from the arcs' factors (``exp_width``), with no exp or log per label pair.

    None when some span's product underflows (its arc and inner item disagree by ~70 nats or
    more, float32): the caller then takes the log-space path, which is exact there too.
    """
    factors = arcs.exp_width(w)
    if factors is None:
        return None
    prod, top = LogSemiring.contract_scaled(*operands)  # (B, S, M, M), max >= 1 per span
    floor = torch.finfo(prod.dtype).tiny * 2.0 ** 24
    items = {}
    for name, (factor, factor_shift) in zip(("inc_right", "inc_left"), factors):
        value = prod * factor
        peak = value.flatten(2).amax(-1)
        if bool((peak < floor).any()):
            return None
        items[name] = (value.div_(peak[..., None, None]), top + factor_shift + torch.log(peak))
    return items


def _complete_stage(semiring, bands: dict, shifts: dict) -> dict:
    """CR and CL of one width w <= max_dist, from incomplete items of widths <= w and complete
    items of widths < w."""
    # CR[i, j, a] = (+)_{r=i+1..j, c} IR[i, r, a, c] * CR[r, j, c]
    right = semiring.contract(bands["ir"].transpose(2, 3), shifts["ir"], bands["cr"].unsqueeze(-1), shifts["cr"])
    # CL[i, j, c] = (+)_{r=i..j-1, a} CL[i, r, a] * IL[r, j, a, c]
    left = semiring.contract(bands["il"].permute(0, 1, 4, 2, 3), shifts["il"], bands["cl"].unsqueeze(-1), shifts["cl"])
    return {"right": right.squeeze(-1), "left": left.squeeze(-1)}


def _row_stage(semiring, bands: dict, shifts: dict) -> dict:
    """CR[i, j] for every j beyond max_dist from i, at once: CR[i, j, a] = (+)_{d<=K, c} IR[i, i+d, a, c]
    * CR[i+d, j, c]. Each incomplete item serves the whole row, so this is a real matrix product.

    Only CR is needed for spans wider than max_dist: a left-complete span that wide could only
    attach to a head outside it by an arc longer than max_dist, so it never reaches the root.
    """
    right = semiring.contract_columns(bands["ir"], shifts["ir"], bands["cr"], shifts["cr"])
    return {"right": right}


def stages(n: int, limit: int):
    """The order of evaluation: widths 1..limit (incomplete items, then complete ones), then the
    complete spans wider than the limit row by row, from the last start position to the root."""
    for w in range(1, limit + 1):
        yield "incomplete", w
        yield "complete", w
    for i in range(n - limit - 1, -1, -1):
        yield "row", i


def run_stage(semiring, charts: Charts, stage: str, w: int, limit: int, arcs: ArcScores, bands=None, arc_values=None):
    """The items one stage computes, by chart name: log-space tensors, or (value, shift) pairs
    already encoded (the log semiring's incomplete items)."""
    with_shift = charts.right_shift is not None
    if bands is None:
        bands = charts.bands(stage, w, limit)
    shifts = charts.bands(stage, w, limit, shift=True) if with_shift else dict.fromkeys(bands)
    if stage == "incomplete":
        return _incomplete_stage(semiring, bands, shifts, arcs, w, arc_values)
    return (_complete_stage if stage == "complete" else _row_stage)(semiring, bands, shifts)
