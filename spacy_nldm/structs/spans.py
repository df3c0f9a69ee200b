"""Exact entity probabilities: the probability that given tokens form exactly one entity of a given type.

A candidate span is a row ``(b, start, end, type)`` of a long tensor ``spans`` (S, 4): tokens
``start..end-1`` of sentence b (0-based, ``0 <= start < end <= lengths[b]``), ``type`` an index into
:attr:`EntityTags.types`. Its event, read in the tags of the scheme (:func:`entity_tags`):

- BIO: y_start = B-X, y_start+1 .. y_end-1 = I-X, and y_end != I-X (or end = the sentence's length);
- BILUO: y_start = U-X for one token, else B-X, I-X ..., L-X.

Its log probability is log Z under the label mask that allows only that event minus log Z, under the
model's own distribution: for a chain, as given (with :func:`~.constraints.constrain` applied, the
scheme's rules hold and every B-X of a valid sequence begins one such span); for the NLDM, summed over
labels and trees (invalid sequences included: they are part of its distribution). Each span is one row of
one batch (the scores repeated by index), so the cost is one log Z per span, on the lanes of
:func:`~.chain.crf_log_partition` and :func:`~.tree.log_partition`; the first-order chain also has a
closed form from one forward and backward pass, whatever the number of spans. Summed over every candidate span of
a sentence the probabilities give the expected number of entities (BIO: of B tags; BILUO: of U tags and of
B tags closed by an L).
"""
from typing import NamedTuple, Optional, Sequence, Tuple

import torch

from .chain import ChainScores, Scores, crf_log_partition
from .chain_second import SecondOrderScores
from .chain_common import real_tokens
from .checks import check_lengths
from .constraints import SCHEMES
from .tree import DirectionalScores, log_partition

Tensor = torch.Tensor
#: the lanes of :func:`crf_span_log_probs`
LANES = ("mask", "closed")
#: the closed form's one pass costs about as much as 5 spans' log Z on the factored lane (float64 log-space
#: steps against exp-space ones; B = 256, n = 30, M = 17-25, one thread): it takes over from 5 spans a sentence
CLOSED_FROM = 5


class EntityTags(NamedTuple):
    """The tag ids of each entity type among a scheme's labels: ``types`` the type names in the order of
    their first tag; ``begin``, ``inside``, ``last``, ``unit`` (T,) long: the ids of B-X, I-X, L-X and U-X
    (-1 for L and U in BIO)."""

    scheme: str
    types: Tuple[str, ...]
    begin: Tensor
    inside: Tensor
    last: Tensor
    unit: Tensor


def entity_tags(labels: Sequence[str], scheme: str) -> EntityTags:
    """The tags of each type among ``labels`` (as :func:`~.constraints.entity_labels` makes them, in any
    order); a ValueError names a type that lacks one of the scheme's tags."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    index = {label: i for i, label in enumerate(labels)}
    types = tuple(dict.fromkeys(label.partition("-")[2] for label in labels if label != "O"))
    prefixes = ("B", "I", "L", "U") if scheme == "BILUO" else ("B", "I")
    ids = {prefix: [] for prefix in ("B", "I", "L", "U")}
    for kind in types:
        for prefix in ("B", "I", "L", "U"):
            tag = f"{prefix}-{kind}"
            if prefix in prefixes and tag not in index:
                raise ValueError(f"the labels have no {tag!r}, which {scheme} needs for the type {kind!r}")
            ids[prefix].append(index.get(tag, -1) if prefix in prefixes else -1)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    return EntityTags(scheme, types, *(as_tensor(ids[prefix]) for prefix in ("B", "I", "L", "U")))


def span_mask(spans: Tensor, tags: EntityTags, lengths: Tensor, n: int, m: int) -> Tensor:
    """(S, N, M) bool: the labels each token of the span's sentence may take in the span's event."""
    spans = _checked_spans(spans, lengths, len(tags.types))
    b, start, end, kind = spans.unbind(1)
    positions = torch.arange(n, device=spans.device)[None, :]
    within = (positions >= start[:, None]) & (positions < end[:, None])  # (S, N)
    to = lambda ids: ids.to(spans.device)[kind][:, None]  # noqa: E731 (S, 1): the span's tag ids
    if tags.scheme == "BIO":
        tag = torch.where(positions == start[:, None], to(tags.begin), to(tags.inside))
    else:
        inner = torch.where(positions == (end - 1)[:, None], to(tags.last), to(tags.inside))
        tag = torch.where(positions == start[:, None], to(tags.begin), inner)
        tag = torch.where((end - start == 1)[:, None], to(tags.unit), tag)
    labels = torch.arange(m, device=spans.device)[None, None, :]
    mask = torch.where(within[:, :, None], labels == tag[:, :, None], True)
    if tags.scheme == "BIO":  # the token after the span does not continue it
        after = (positions == end[:, None]) & (end < lengths.to(spans.device)[b])[:, None]
        mask = mask & ~(after[:, :, None] & (labels == to(tags.inside)[:, :, None]))
    return mask


def crf_span_log_probs(scores: Scores, lengths: Tensor, spans: Tensor, tags: EntityTags, *,
                       lane: Optional[str] = None) -> Tensor:
    """log P (S,) of each span's event (module docstring) under a chain: :class:`~.chain.ChainScores`,
    :class:`~.chain_second.SecondOrderScores` or (B, N, M, M[, M]) potentials, with the scheme's rules
    already applied (:func:`~.constraints.constrain`) where they should hold; differentiable. ``lane``
    (:data:`LANES`): ``mask`` (one log Z per span) or, order 1 only, ``closed`` (one forward and backward
    pass for all spans, :func:`_first_order`); by default ``closed`` from ``CLOSED_FROM`` spans a sentence."""
    emissions = scores.emissions if isinstance(scores, (ChainScores, SecondOrderScores)) else scores
    batch, n, m = emissions.shape[0], emissions.shape[1], emissions.shape[-1]
    lengths = check_lengths(lengths, batch, n, emissions.device)
    first_order = isinstance(scores, ChainScores) or not isinstance(scores, SecondOrderScores) and scores.dim() == 4
    if lane not in (None,) + LANES or lane == "closed" and not first_order:
        raise ValueError(f"lane must be one of {LANES} or None ('closed': order 1 only), got {lane!r}")
    if lane == "closed" or lane is None and first_order and len(spans) >= CLOSED_FROM * max(batch, 1):
        potentials = scores.potentials(lengths) if isinstance(scores, ChainScores) else scores
        return _first_order(potentials, lengths, _checked_spans(spans, lengths, len(tags.types)), tags)
    mask = span_mask(spans, tags, lengths, n, m)
    rows = spans[:, 0].to(emissions.device)
    if isinstance(scores, (ChainScores, SecondOrderScores)):
        repeated = scores._replace(emissions=scores.emissions[rows])
    else:
        repeated = scores[rows]
    log_z = crf_log_partition(scores, lengths)
    return _difference(crf_log_partition(repeated, lengths[rows], label_mask=mask), log_z[rows])


def span_log_probs(scores, lengths: Tensor, spans: Tensor, tags: EntityTags, *, max_dist: Optional[int] = None
                   ) -> Tensor:
    """log P (S,) of each span's event (module docstring) under the NLDM, summed over label sequences and
    trees: ``scores`` :class:`~.tree.DirectionalScores` or dense (B, N+1, N+1, M, M) arc scores and
    ``max_dist`` as :func:`~.tree.log_partition` takes them; differentiable."""
    batch, n1, _, m, _ = scores.shape
    lengths = check_lengths(lengths, batch, n1 - 1, _device(scores))
    mask = span_mask(spans, tags, lengths, n1 - 1, m)
    rows = spans[:, 0].to(lengths.device)
    log_z = log_partition(scores, lengths, max_dist=max_dist)
    some, label_mask = _restricted(scores, rows, mask)
    log_s = log_partition(some, lengths[rows], label_mask=label_mask, max_dist=max_dist)
    return _difference(log_s, log_z[rows])


def _restricted(scores, rows: Tensor, mask: Tensor):
    """The NLDM's scores of sentences ``rows`` (R,) with token labels restricted to ``mask`` (R, N, M), as
    the arguments (scores, label_mask) of :func:`~.tree.log_partition`. DirectionalScores get -inf on the
    arcs into a token with a disallowed label instead of a label mask (each token has one arc in, so the
    sum is the same), which keeps them on the compiled lane."""
    if isinstance(scores, DirectionalScores):
        F = scores.F[rows].masked_fill(~mask.to(scores.F.device)[:, :, None, None, :], float("-inf"))
        return DirectionalScores(F, scores.distance_bias), None
    root = torch.ones_like(mask[:, :1])
    return scores[rows], torch.cat([root, mask], 1)


def _first_order(potentials: Tensor, lengths: Tensor, spans: Tensor, tags: EntityTags) -> Tensor:
    """The first-order chain's closed form, from the forward and backward log sums (float64), alpha_t[c]
    over the paths up to token t in c and beta_t[c] over the rest: with y the span's tags,

        log P = alpha_start[y_start] + sum_{start < t < end} pot[t, y_t-1, y_t] + tail - log Z

    tail = beta_end-1[y_end-1] in BILUO and at a sentence's end, else (BIO) the log sum over c != I-X of
    pot[end, y_end-1, c] + beta_end[c]."""
    pot = potentials.to(torch.float64)
    batch, n, m, _ = pot.shape
    real = real_tokens(lengths, n)
    alpha, beta = [pot[:, 0, 0]], [pot.new_zeros(batch, m)]
    for t in range(1, n):
        alpha.append(_log_sum_exp(alpha[-1][:, :, None] + pot[:, t], 1))
    for t in range(n - 1, 0, -1):  # beta_{t-1}[a] = log sum_c pot[t, a, c] + beta_t[c]; 0 from the last token on
        later = _log_sum_exp(pot[:, t] + beta[-1][:, None, :], 2)
        beta.append(torch.where(real[:, t, None], later, 0.0))
    alpha, beta = torch.stack(alpha, 1), torch.stack(beta[::-1], 1)  # (B, N, M)
    rows = torch.arange(batch, device=lengths.device)
    log_z = _log_sum_exp(alpha[rows, (lengths - 1).clamp_min(0)], -1)
    b, start, end, kind = spans.unbind(1)
    tag = lambda ids: ids.to(spans.device)[kind]  # noqa: E731 (S,): the span's tag ids
    single = end - start == 1
    first = torch.where(single & (tags.scheme == "BILUO"), tag(tags.unit), tag(tags.begin))
    closing = tag(tags.last) if tags.scheme == "BILUO" else tag(tags.inside)
    final = torch.where(single, first, closing)  # y_end-1
    total = alpha[b, start, first]
    width = int((end - start).max()) if len(spans) else 1
    steps = start[:, None] + torch.arange(1, width, device=spans.device)[None, :]  # (S, W-1): t = start+1 ..
    inside = steps < end[:, None]
    current = torch.where(steps == (end - 1)[:, None], final[:, None], tag(tags.inside)[:, None])
    previous = torch.cat([first[:, None], current[:, :-1]], 1)[:, : steps.shape[1]]
    at = steps.clamp_max(n - 1)
    moves = pot[b[:, None], at, previous, current]
    total = total + torch.where(inside, moves, 0.0).sum(1)
    if tags.scheme == "BILUO":
        tail = beta[b, end - 1, final]
    else:
        after = end.clamp_max(n - 1)
        options = pot[b, after, final] + beta[b, after]  # (S, M): y_end = c
        options = options.masked_fill(torch.arange(m, device=spans.device)[None, :] == tag(tags.inside)[:, None],
                                      float("-inf"))
        tail = torch.where(end < lengths[b], _log_sum_exp(options, 1), beta[b, end - 1, final])
    return _difference(total + tail, log_z[b]).to(potentials.dtype)


def _log_sum_exp(x: Tensor, dim: int) -> Tensor:
    """log sum exp over ``dim``, -inf where every term is, with gradient 0 there (torch's gives NaN)."""
    top = x.detach().amax(dim, keepdim=True)
    top = torch.where(torch.isfinite(top), top, 0.0)
    total = (x - top).exp().sum(dim)
    some = total > 0
    return torch.where(some, torch.where(some, total, 1.0).log() + top.squeeze(dim), float("-inf"))


def _difference(log_s: Tensor, log_z: Tensor) -> Tensor:
    """log S - log Z, -inf where the sentence is impossible (log Z = -inf)."""
    return torch.where(log_z > float("-inf"), log_s - log_z, torch.full_like(log_s, float("-inf")))


def _device(scores) -> torch.device:
    return scores.F.device if isinstance(scores, DirectionalScores) else scores.device


def _checked_spans(spans: Tensor, lengths: Tensor, types: int) -> Tensor:
    if not isinstance(spans, Tensor) or spans.dim() != 2 or spans.shape[1] != 4 or spans.is_floating_point():
        got = f"{spans.dtype} {tuple(spans.shape)}" if isinstance(spans, Tensor) else type(spans).__name__
        raise ValueError(f"spans must be an integer tensor (S, 4) of rows (b, start, end, type), got {got}")
    spans = spans.long().to(lengths.device)
    b, start, end, kind = spans.unbind(1)
    ok = (b >= 0) & (b < len(lengths)) & (kind >= 0) & (kind < types) & (start >= 0) & (start < end)
    ok = ok & (end <= lengths[b.clamp(0, max(len(lengths) - 1, 0))])
    if not bool(ok.all()):
        row = int((~ok).nonzero()[0, 0])
        raise ValueError(f"span {row} {spans[row].tolist()} is not (b, start, end, type) with 0 <= start < end <= "
                         f"lengths[b] and 0 <= type < {types}")
    return spans
