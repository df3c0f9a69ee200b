"""The backward passes of the tree's inside algorithm, one per kind of semiring: the explicit outside
pass (log semiring: marginals), the backtrack through recorded argmaxes (Viterbi), and per-stage
recomputation under autograd (any other semiring, e.g. the broadcast reference)."""
from typing import Tuple

import torch

from .arcs import ArcScores
from .charts import Charts, band
from .semiring import decode
from .stages import run_stage, stages

Tensor = torch.Tensor


def outside_by_recomputation(semiring, charts: Charts, arcs: ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """Generic backward: recompute one stage at a time under autograd, last stage first.

    Gradients are taken with respect to the stored (encoded) values; used for semirings without an
    explicit outside pass (the broadcast reference).
    """
    n = arcs.shape[1] - 1
    grads = Charts(arcs.shape, limit, arcs.tensor, with_shift=False)
    with torch.enable_grad():
        root = charts.right[:, 0, :, 0].detach().requires_grad_(True)
        shift = None if charts.right_shift is None else charts.right_shift[:, 0, :]
        (g,) = torch.autograd.grad(decode((root, shift), 0), root, grad_root)
    grads.right[:, 0, :, 0] += g
    grad_scores = torch.zeros_like(arcs.tensor)
    for stage, w in reversed(list(stages(n, limit))):
        with torch.enable_grad():
            bands = {k: v.detach().requires_grad_(True) for k, v in charts.bands(stage, w, limit).items()}
            arc_values = tuple(a.requires_grad_(True) for a in arcs.width(w)) if stage == "incomplete" else ()
            out = run_stage(semiring, charts, stage, w, limit, arcs, bands, arc_values)
            cell_grads = grads.cells(stage, w, limit)
            inputs = list(bands.values()) + list(arc_values)
            input_grads = torch.autograd.grad(
                list(out.values()), inputs, [cell_grads[name] for name in out]
            )
        for view, g in zip(grads.bands(stage, w, limit).values(), input_grads):
            view.add_(g)
        if arc_values:
            arcs.add_grad(grad_scores, w, *input_grads[len(bands):])
    return grad_scores


def outside_log(charts: Charts, arcs: ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """The outside pass of the log semiring, explicit: no stage is recomputed.

    ``outer`` holds d(output) / d(log value) of every item. An item computed as
    log sum_k exp(u_k + v_k) passes to each term the share exp(u_k + v_k - item), which is
    rebuilt from the stored scaled values and shifts; that share is the posterior of the term.

    The complete-span stages push their shares to the narrower complete items at once, but
    an incomplete item's outer value is pulled when its own stage comes: the sum over every
    complete span that used it is then one matrix product per item (``_pull_incomplete``),
    which reads the item once instead of once per span.
    """
    n = arcs.shape[1] - 1
    rows = limit < n  # only row stages push into incomplete items; without them, no chart for it
    outer = outer_charts(arcs, limit if rows else 0, grad_root)
    terms = Charts(arcs.shape, 1, arcs.tensor, with_shift=True)  # per complete span: ratio and top
    grad_scores = torch.zeros_like(arcs.tensor)
    tiny = torch.finfo(arcs.tensor.dtype).tiny
    for stage, w in reversed(list(stages(n, limit))):
        values, shifts = charts.bands(stage, w, limit), charts.bands(stage, w, limit, shift=True)
        into = outer.bands(stage, w, limit)
        if stage == "row":
            _row_outside(values, shifts, outer.cells(stage, w, limit)["right"], into, tiny)
        elif stage == "complete":
            cells, cell_shifts = charts.cells(stage, w, limit), charts.cells(stage, w, limit, shift=True)
            from_cells = outer.cells(stage, w, limit)
            ratio_cells, top_cells = terms.cells(stage, w, limit), terms.cells(stage, w, limit, shift=True)
            # CR: free label a, summed (d, c); CL: free label c, summed (d, a); x as the chart stores it
            for name, inc, comp, x in (
                ("right", "ir", "cr", values["ir"].transpose(2, 3)),
                ("left", "il", "cl", values["il"].permute(0, 1, 4, 2, 3)),
            ):
                ratio, top = _complete_outside(
                    x, shifts[inc], values[comp], shifts[comp], cells[name], cell_shifts[name],
                    from_cells[name], into[comp], tiny,
                )
                ratio_cells[name].copy_(ratio)
                top_cells[name].copy_(top)
        else:
            from_right, from_left = _pull_incomplete(charts, terms, w, limit)
            if rows:
                pushed = outer.cells(stage, w, limit)
                from_right, from_left = from_right + pushed["inc_right"], from_left + pushed["inc_left"]
            arcs.add_grad(grad_scores, w, from_right, from_left)
            # inner(s, a, c) = log sum_k exp(CR[s, k, a] + CL[s, k, c])
            pair = shifts["cr"] + shifts["cl"]
            scale = torch.exp(pair - pair.amax(-1, keepdim=True)).unsqueeze(-1)  # (B, S, w, 1)
            cr, cl = values["cr"] * scale, values["cl"]
            inner = torch.matmul(cr.transpose(-1, -2), cl).clamp_min(tiny)  # (B, S, M, M), up to exp(top)
            share = (from_right + from_left) / inner
            into["cr"].add_(cr * torch.matmul(cl, share.transpose(-1, -2)))
            into["cl"].add_(cl * torch.matmul(cr, share))
    return grad_scores


def _complete_outside(x, x_shift, y, y_shift, out, out_shift, from_out, into_y, tiny) -> Tuple[Tensor, Tensor]:
    """Outside step of out[s, f] = log sum_{d, l} exp(X[s, f, d, l] + Y[s, d, l]), all in scaled form:
    x (B, S, F, D, L), y (B, S, D, L), out (B, S, F). Adds the shares of Y into ``into_y``.

    The share of term (d, f, l) is x[d, f, l] * ratio[f] * y[d, l] * exp(pair[d] - top) with
    pair = x_shift + y_shift; returns ``ratio`` (B, S, F) and ``top`` (B, S) for the shares of X,
    which :func:`_pull_incomplete` sums later over all spans at once.
    """
    pair = x_shift + y_shift
    top = pair.amax(-1)  # as in the forward contraction
    y = y * torch.exp(pair - top.unsqueeze(-1)).unsqueeze(-1)
    total = (out * torch.exp(out_shift - top).unsqueeze(-1)).clamp_min(tiny)  # sum_{d,l} x y, (B, S, F)
    ratio = from_out / total
    into_y.add_(y * (x * ratio[:, :, :, None, None]).sum(2))
    return ratio, top


def _pull_incomplete(charts: Charts, terms: Charts, w: int, limit: int) -> Tuple[Tensor, Tensor]:
    """The outer values of IR[s, s+w] and IL[s, s+w] (B, S, M, M) from their shares in every
    complete span of width <= ``limit`` that used them, as one matrix product per item.

    IR[i, r] served CR[i, j] for j = r..i+limit with CR[r, j]; IL[r, j] served CL[i, j] for
    i = j-limit..r with CL[i, r]. Index t runs over those J = limit - w + 1 spans; the views run
    past the charts' edges where a span does not exist (padded zeros), and its factor is 0 there.
    """
    n1 = charts.right.shape[1]
    spans, J = n1 - w, min(limit, n1 - 1) - w + 1
    t = torch.arange(J, device=charts.right.device)
    s = torch.arange(spans, device=charts.right.device)[:, None]
    items, item_shifts = charts.cells("incomplete", w, limit), charts.cells("incomplete", w, limit, shift=True)
    pulled = []
    for name in ("right", "left"):
        inc, inc_shift = items["inc_" + name], item_shifts["inc_" + name]
        if name == "right":  # CR[s+w, s+w+t] (label c), span (s, s+w+t) (label a)
            exists = s + w + t <= n1 - 1
            comp, comp_shift = (band(c, spans, J, w, w, 0, 1) for c in (charts.right, charts.right_shift))
            ratio, top = (band(c, spans, J, 0, w, 0, 1) for c in (terms.right, terms.right_shift))
        else:  # CL[i, s] (label a) and span (i, s+w) (label c), i = s - J + 1 + t
            exists = s - J + 1 + t >= 0
            comp, comp_shift = (band(c, spans, J, 1 - J, 0, 1, 0) for c in (charts.left, charts.left_shift))
            ratio, top = (band(c, spans, J, 1 - J, w, 1, 0) for c in (terms.left, terms.left_shift))
        exponent = inc_shift.unsqueeze(-1) + comp_shift - top  # pair - top of each span, <= 0
        factor = torch.exp(torch.where(exists, exponent, float("-inf"))).unsqueeze(-1)  # (B, S, J, 1)
        if name == "right":
            pulled.append(torch.matmul((ratio * factor).transpose(-1, -2), comp).mul_(inc))
        else:  # formed [c, a], as IL is stored, so that the product with it reads memory in order
            total = torch.matmul((ratio * factor).transpose(-1, -2), comp)
            pulled.append(total.mul_(inc.transpose(-1, -2)).transpose(-1, -2))
    return pulled[0], pulled[1]


def backtrack_max(traces: list, arcs: ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """Backward of the max semiring: each cell passes its gradient to the split point and labels that
    won its max in the forward pass (``traces``, one per contraction in call order). From the root's
    gradient this marks the arcs of the best structure."""
    outer = outer_charts(arcs, limit, grad_root)
    grad_scores = torch.zeros_like(arcs.tensor)
    traces = list(traces)
    for stage, key in reversed(list(stages(arcs.shape[1] - 1, limit))):
        into, cells = outer.bands(stage, key, limit), outer.cells(stage, key, limit)
        if stage == "row":  # x = IR (B, K, F, L), y = CR (B, K, G, L); won (B, G, F) over (K, L)
            won, grad = traces.pop(), cells["right"]
            split, label = _unflatten(won, into["ir"].shape[-1])
            b, g, f = _grid(won.shape, won.device)
            into["ir"].index_put_((b, split, f, label), grad, accumulate=True)
            into["cr"].index_put_((b, split, g, label), grad, accumulate=True)
        elif stage == "complete":  # CR: won (B, S, a, 1) over (d, c); CL: won (B, S, c, 1) over (d, a)
            for name, inc, comp in (("left", "il", "cl"), ("right", "ir", "cr")):
                won, grad = traces.pop().squeeze(-1), cells[name]
                split, label = _unflatten(won, into[comp].shape[-1])
                b, s, f = _grid(won.shape, won.device)
                head_dep = (f, label) if name == "right" else (label, f)  # IR[.., a, c] / IL[.., a, c]
                into[inc].index_put_((b, s, split) + head_dep, grad, accumulate=True)
                into[comp].index_put_((b, s, split, label), grad, accumulate=True)
        else:  # inner: won (B, S, a, c) over the split k
            won = traces.pop()
            from_right, from_left = cells.values()
            arcs.add_grad(grad_scores, key, from_right, from_left)
            grad = from_right + from_left
            b, s, a, c = _grid(won.shape, won.device)
            into["cr"].index_put_((b, s, won, a), grad, accumulate=True)
            into["cl"].index_put_((b, s, won, c), grad, accumulate=True)
    return grad_scores


def outer_charts(arcs: ArcScores, limit: int, grad_root: Tensor) -> Charts:
    """Zeroed charts for an outside pass, the root's gradient in place."""
    outer = Charts(arcs.shape, limit, arcs.tensor, with_shift=False)
    outer.right[:, 0, :, 0] = grad_root
    return outer


def _unflatten(index: Tensor, size: int) -> Tuple[Tensor, Tensor]:
    """An index into a flattened (K, L) pair of axes, L = ``size`` -> (k, l)."""
    return torch.div(index, size, rounding_mode="floor"), index % size


def _grid(shape, device) -> Tuple[Tensor, ...]:
    """Index tensors of every position of ``shape``, one per dimension, each of that shape."""
    return torch.meshgrid(*(torch.arange(n, device=device) for n in shape), indexing="ij")


def _row_outside(values: dict, shifts: dict, from_row: Tensor, into: dict, tiny: float) -> None:
    """Outside step of a row stage (see ``LogSemiring.contract_columns``): ir (B, K, F, L) with shifts
    (B, K), cr (B, K, G, L) with shifts (B, K, G), the row's outer gradients (B, G, F)."""
    x, y = values["ir"], values["cr"]
    b, k, f, l = x.shape
    g = y.shape[2]
    pair = shifts["ir"].unsqueeze(-1) + shifts["cr"]  # (B, K, G)
    y = y * torch.exp(pair - pair.amax(1, keepdim=True)).unsqueeze(-1)
    x_flat = x.transpose(1, 2).reshape(b, f, k * l)
    y_flat = y.permute(0, 2, 1, 3).reshape(b, g, k * l)
    total = torch.bmm(x_flat, y_flat.transpose(1, 2)).clamp_min(tiny)  # (B, F, G), as in the forward
    share = from_row.transpose(1, 2) / total
    into["ir"].add_(x * torch.bmm(share, y_flat).reshape(b, f, k, l).transpose(1, 2))
    into["cr"].add_(y * torch.bmm(share.transpose(1, 2), x_flat).reshape(b, g, k, l).transpose(1, 2))
