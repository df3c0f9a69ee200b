"""The k best label sequences: exact and in order for the chains (:func:`crf_nbest`), and for the NLDM the
k best valid sequences by its label marginals, with their exact probabilities (:func:`label_nbest`).

:func:`crf_nbest` is list Viterbi: the recursion of :mod:`.chain` in the max semiring keeping, for each
state s (the last ``order`` labels) and token t, the k best scores of the paths that end in s, with
back-pointers to (previous state, rank):

    V_t[(p, c)] = k-max over (a, j) of V_{t-1}[(a, p), j] + X_t[a, p, c],   the k best: k-max over (s, j) of V_n-1[s, j]

Each path is counted once (the (a, j) are distinct), so the k results are k distinct sequences in
order of score (any order among equal scores); a sentence with fewer than k sequences of finite score
gets score -inf and labels 0 in the rest. Their probabilities are exp(score - log Z)
(:func:`~.chain.crf_log_partition` of the same scores). Lanes (``lane=``): ``compiled``
(:mod:`.compiled_nbest`, the default for :class:`~.chain.ChainScores` and
:class:`~.chain_second.SecondOrderScores` on the CPU: one loop per sentence, no potentials, each state's
k-max a merge of the previous states' sorted lists, in two passes) and ``reference`` (below, on the
potentials, any order and device).
"""
from typing import NamedTuple, Optional

import torch

from . import compiled_nbest
from .chain import ChainScores, Scores
from .chain_common import as_steps, real_tokens, start_state
from .chain_second import SecondOrderScores
from .checks import check_label_mask, check_lengths, check_scores
from .constraints import Transitions, constrain
from .tree import DirectionalScores, distance_bias_matrix, label_marginals, log_partition

Tensor = torch.Tensor
#: the lanes of :func:`crf_nbest`
LANES = ("compiled", "reference")


class NBest(NamedTuple):
    """``labels`` (B, k, N) the k best label sequences of each sentence (0 beyond its length), ``scores``
    (B, k) theirs, best first; -inf and labels 0 where the sentence has fewer than k."""

    labels: Tensor
    scores: Tensor


def crf_nbest(scores: Scores, lengths: Tensor, k: int, *, label_mask: Optional[Tensor] = None,
              lane: Optional[str] = None) -> NBest:
    """The k best label sequences of a chain and their scores (module docstring): ``scores`` as
    :func:`~.chain.crf_viterbi` takes them (ChainScores, SecondOrderScores, or (B, N, M, M[, M])
    potentials), ``label_mask`` (B, N, M) restricting each token's labels. Not differentiable."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    factored = isinstance(scores, (ChainScores, SecondOrderScores))
    emissions = scores.emissions if factored else scores
    check_scores(emissions, "emissions" if factored else "potentials")
    if not factored and emissions.dim() not in (4, 5):
        raise ValueError(f"potentials must be (B, N, M, M) or (B, N, M, M, M), got {tuple(emissions.shape)}")
    lengths = scores.check(lengths) if factored else check_lengths(lengths, *emissions.shape[:2], emissions.device)
    mask = check_label_mask(label_mask, (*emissions.shape[:2], emissions.shape[-1]))
    if lane not in (None,) + LANES:
        raise ValueError(f"lane must be one of {LANES} or None, got {lane!r}")
    if lane == "compiled" and not (factored and emissions.device.type == "cpu"):
        raise ValueError("lane 'compiled' needs ChainScores or SecondOrderScores on the CPU")
    _refuse_nan(scores, lengths)
    with torch.no_grad():
        scores = _masked(scores, None if mask is None else mask.to(emissions.device))
        if lane == "compiled" or (lane is None and factored and emissions.device.type == "cpu"):
            labels, best = compiled_nbest.nbest(scores, lengths, k)
        else:
            potentials = scores.potentials(lengths) if factored else scores
            labels, best = _reference(potentials.detach(), lengths, k)
    return NBest(labels.to(emissions.device), best.to(emissions.device))


def label_nbest(scores, lengths: Tensor, k: int, *, allowed: Optional[Transitions] = None,
                max_dist: Optional[int] = None, first: Optional[Tensor] = None, last: Optional[Tensor] = None
                ) -> NBest:
    """For the NLDM (``scores`` and ``max_dist`` as :func:`~.tree.log_partition` takes them): the k label
    sequences of the largest products of label marginals P(y_t | x) (:func:`crf_nbest` on the chain of the
    log marginals and zero transitions; with ``allowed``, ``first`` and ``last`` the valid ones only, as
    :func:`~.constraints.valid_decode` decodes its best), reordered by their exact log probability
    log P(y | x), summed over trees, which ``scores`` holds. They are the k most probable sequences where
    the labels are independent given x, not in general (the exact k best would need a k-best inside over
    labels and trees)."""
    with torch.no_grad():
        marginals = label_marginals(scores, lengths, max_dist=max_dist).double()
        batch, n, m = marginals.shape
        lengths = lengths.to(marginals.device).long()
        chain = ChainScores(marginals.log(), marginals.new_zeros(m, m))
        if allowed is not None:
            chain = constrain(chain, allowed, lengths, first, last)
        found = crf_nbest(chain, lengths, k)
        rows = torch.arange(batch, device=lengths.device).repeat_interleave(k)
        arcs = _labelled_arcs(scores, rows, found.labels.reshape(batch * k, n), max_dist)
        log_s = log_partition(arcs, lengths[rows], max_dist=max_dist).reshape(batch, k)
        log_p = log_s.double() - log_partition(scores, lengths, max_dist=max_dist).double()[:, None]
        log_p = torch.where(found.scores > float("-inf"), log_p, float("-inf"))
        order = log_p.argsort(dim=1, descending=True, stable=True)
        return NBest(found.labels.gather(1, order[:, :, None].expand(batch, k, n)), log_p.gather(1, order))


def _labelled_arcs(scores, rows: Tensor, labels: Tensor, max_dist: Optional[int]) -> Tensor:
    """Dense one-label arc scores (R, N+1, N+1, 1, 1) of the NLDM's sentences ``rows`` (R,) with the labels
    (R, N): each arc's score for its head's label (the root's: 0) and its dependent's, the distance bias
    included; their log Z is log S of those labels (summed over trees)."""
    r = torch.arange(len(rows), device=rows.device)[:, None, None]
    big, n = labels.shape
    codes = torch.cat([labels.new_zeros(big, 1), labels], 1)  # (R, N+1): each position's label, the root's 0
    heads = torch.arange(n + 1, device=rows.device)[None, :, None]
    deps = torch.arange(1, n + 1, device=rows.device)[None, None, :]
    if not isinstance(scores, DirectionalScores):
        arcs = scores[rows][r, heads, deps, codes[:, :, None], codes[:, None, 1:]]  # (R, N+1, N)
        return torch.cat([arcs.new_zeros(big, n + 1, 1), arcs], 2)[..., None, None]
    into = scores.F[rows].gather(-1, labels[:, :, None, None, None].expand(big, n, 2, scores.F.shape[3], 1))[..., 0]
    head_code = torch.where(heads > 0, codes[:, :, None] + 1, 0)  # F's head axis: 1 + label, 0 = the root
    arcs = into[r, deps - 1, (heads > deps).long(), head_code]  # (R, N+1, N): into[., d-1, direction, head]
    arcs = torch.cat([arcs.new_zeros(big, n + 1, 1), arcs], 2)
    if scores.distance_bias is not None:
        arcs = arcs + distance_bias_matrix(scores.distance_bias.to(arcs.dtype), n + 1, max_dist)
    return arcs[..., None, None]


def _refuse_nan(scores: Scores, lengths: Tensor) -> None:
    """A ValueError if a score that is read (any but those of padding tokens) is +inf or NaN."""
    factored = isinstance(scores, (ChainScores, SecondOrderScores))
    for name, x in zip(scores._fields, scores) if factored else [("potentials", scores)]:
        if x is not None and name in ("emissions", "potentials"):
            x = x[real_tokens(lengths, x.shape[1])]
        if x is not None and bool((x.isnan() | (x == float("inf"))).any()):
            raise ValueError(f"{name} hold +inf or NaN where they are read; scores must be finite or -inf")


def _masked(scores: Scores, mask: Optional[Tensor]) -> Scores:
    """Disallowed labels at -inf: the emissions of factored scores, the current label's axis of potentials."""
    if mask is None:
        return scores
    if isinstance(scores, (ChainScores, SecondOrderScores)):
        return scores._replace(emissions=scores.emissions.masked_fill(~mask, float("-inf")))
    batch, n, m = mask.shape
    return scores.masked_fill(~mask.reshape(batch, n, *((1,) * (scores.dim() - 3)), m), float("-inf"))


def _reference(potentials: Tensor, lengths: Tensor, k: int):
    """List Viterbi on potentials (B, N, M, M[, M]): labels (B, k, N) and scores (B, k). A state is the
    last ``order`` labels, flat (p, c) with p the older ones (as in :mod:`.chain`); padding tokens keep
    the state and rank."""
    steps = as_steps(potentials)  # X_t[a, p, c]: (B, N, A, P, C)
    batch, n, m, p, _ = steps.shape
    v = start_state(batch, m * p, potentials)[:, :, None].repeat(1, 1, k)  # (B, S, k)
    v[:, :, 1:] = float("-inf")
    real = real_tokens(lengths, n)
    keep = torch.arange(m * p * k, device=potentials.device).reshape(1, m * p, k).expand(batch, m * p, k)
    pointers = []
    for t in range(n):
        # candidates [b, p, c, (a, j)] = V_{t-1}[(a, p), j] + X_t[a, p, c]
        cand = v.reshape(batch, m, p, 1, k) + steps[:, t, :, :, :, None]  # (B, A, P, C, k)
        best, arg = cand.permute(0, 2, 3, 1, 4).reshape(batch, p * m, m * k).topk(k, dim=-1)
        a, j = arg // k, arg % k
        previous = (a * p + torch.arange(p * m, device=a.device)[None, :, None] // m) * k + j  # flat (state, rank)
        v = torch.where(real[:, t, None, None], best, v)
        pointers.append(torch.where(real[:, t, None, None], previous, keep))
    best, flat = v.reshape(batch, -1).topk(k, dim=-1)  # (B, k) flat (state, rank)
    labels = torch.zeros(batch, k, n, dtype=torch.long, device=potentials.device)
    for t in range(n - 1, -1, -1):
        labels[:, :, t] = flat // k % m  # the state's newest label
        flat = pointers[t].reshape(batch, -1).gather(1, flat)
    found = real[:, None, :] & (best > float("-inf"))[:, :, None]
    return labels * found, best
