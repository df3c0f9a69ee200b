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
:func:`~.chain.crf_log_partition` and :func:`~.tree.log_partition`. Summed over every candidate span of
a sentence the probabilities give the expected number of entities (BIO: of B tags; BILUO: of U tags and of
B tags closed by an L).
"""
from typing import NamedTuple, Optional, Sequence, Tuple

import torch

from .chain import ChainScores, Scores, crf_log_partition
from .chain_second import SecondOrderScores
from .checks import check_lengths
from .constraints import SCHEMES
from .tree import DirectionalScores, log_partition

Tensor = torch.Tensor


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


def crf_span_log_probs(scores: Scores, lengths: Tensor, spans: Tensor, tags: EntityTags) -> Tensor:
    """log P (S,) of each span's event (module docstring) under a chain: :class:`~.chain.ChainScores`,
    :class:`~.chain_second.SecondOrderScores` or (B, N, M, M[, M]) potentials, with the scheme's rules
    already applied (:func:`~.constraints.constrain`) where they should hold; differentiable."""
    emissions = scores.emissions if isinstance(scores, (ChainScores, SecondOrderScores)) else scores
    batch, n, m = emissions.shape[0], emissions.shape[1], emissions.shape[-1]
    lengths = check_lengths(lengths, batch, n, emissions.device)
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
