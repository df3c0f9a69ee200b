"""Allowed-transition constraints for the chains: entity labels in BIO or BILUO, and the label sequences
they allow.

A label is ``"O"`` or ``PREFIX-TYPE`` (the type may hold further hyphens: ``B-creative-work``). The rules:

- BIO: ``I-X`` only after ``B-X`` or ``I-X``, so never first.
- BILUO: after ``B-X`` or ``I-X`` only ``I-X`` or ``L-X``; ``I-X`` and ``L-X`` only after ``B-X`` or ``I-X``;
  the first label is ``O``, ``B-*`` or ``U-*``, the last ``O``, ``L-*`` or ``U-*``.

:func:`constrain` writes -inf onto every score a forbidden transition reads (a structural zero: the
lanes of :mod:`.chain` keep it exact), so that an invalid sequence has probability exactly 0 in log Z,
the marginals and Viterbi; the start rule applies to the sequences with ``first[b]``, the end rule to
those with ``last[b]`` (a window cut from the middle of a sentence has neither). :func:`valid_decode`
returns the valid sequence of the largest summed token scores (given label marginals: the
minimum-Bayes-risk labelling among the valid ones).
"""
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

from .chain import ChainScores, Scores, crf_viterbi
from .chain_second import SecondOrderScores
from .checks import Decoded, check_lengths

Tensor = torch.Tensor

#: the schemes :func:`entity_labels` and :func:`allowed_transitions` know
SCHEMES = ("BIO", "BILUO")
_PREFIXES = {"BIO": ("B", "I"), "BILUO": ("B", "I", "L", "U")}


class Transitions(NamedTuple):
    """Allowed transitions, bool tensors: ``start`` (M,) the first label, ``transitions`` (M, M) indexed
    [previous, current], ``end`` (M,) the last label."""

    start: Tensor
    transitions: Tensor
    end: Tensor


def entity_labels(types: Sequence[str], scheme: str) -> List[str]:
    """``"O"`` then, per type in the given order, ``B-T, I-T`` (BIO) or ``B-T, I-T, L-T, U-T`` (BILUO)."""
    return ["O"] + [f"{prefix}-{kind}" for kind in types for prefix in _prefixes(scheme)]


def allowed_transitions(labels: Sequence[str], scheme: str) -> Transitions:
    """The transitions ``scheme`` allows between ``labels`` (any order; see the module docstring); a
    ValueError names a label that is not ``O`` or ``PREFIX-TYPE`` of the scheme."""
    parsed = [_parse(label, scheme) for label in labels]
    m = len(parsed)
    moves = torch.ones(m, m, dtype=torch.bool)
    for a, (before, kind_a) in enumerate(parsed):
        opened = scheme == "BILUO" and before in ("B", "I")  # BILUO: B-X and I-X must be continued
        for c, (prefix, kind_c) in enumerate(parsed):
            if prefix == "I" or (scheme == "BILUO" and prefix == "L"):  # I-X (L-X) only after B-X or I-X
                moves[a, c] = before in ("B", "I") and kind_a == kind_c
            elif opened:
                moves[a, c] = False
    start = torch.tensor([prefix not in ("I", "L") for prefix, _ in parsed], dtype=torch.bool)
    end = torch.tensor([scheme == "BIO" or prefix not in ("B", "I") for prefix, _ in parsed], dtype=torch.bool)
    return Transitions(start, moves, end)


def constrain(scores: Scores, allowed: Transitions, lengths: Tensor, first: Optional[Tensor] = None,
              last: Optional[Tensor] = None) -> Scores:
    """``scores`` of the same kind (:class:`~.chain.ChainScores`, :class:`~.chain_second.SecondOrderScores`,
    order-1 (B, N, M, M) or order-2 (B, N, M, M, M) potentials) with -inf on every score a forbidden
    transition reads; differentiable (gradient 0 there). The start and end rules apply to the sequences
    with ``first[b]`` and ``last[b]`` (bool (B,), default all): on the emissions (for potentials: the
    current label's axis) of their first and last real token, or, where a rule holds for every sequence,
    on the scores only the first (ChainScores, SecondOrderScores) or last (ChainScores) token reads, with
    no copy of the emissions."""
    emissions = scores.emissions if isinstance(scores, (ChainScores, SecondOrderScores)) else scores
    batch, n, m = emissions.shape[0], emissions.shape[1], emissions.shape[-1]
    device, minus_inf = emissions.device, float("-inf")
    lengths = check_lengths(lengths, batch, n, device)
    allowed = _checked(allowed, m, device)
    first, last = _flags(first, batch, device), _flags(last, batch, device)
    forbidden = ~allowed.transitions  # [previous, current]
    if isinstance(scores, ChainScores):
        start, end = (emissions.new_zeros(m) if x is None else x for x in (scores.start, scores.end))
        emissions = _rules_on_emissions(emissions, allowed, lengths, first, last)
        return ChainScores(emissions, scores.transitions.masked_fill(forbidden, minus_inf),
                           start.masked_fill(~allowed.start, minus_inf) if first is None else scores.start,
                           end.masked_fill(~allowed.end, minus_inf) if last is None else scores.end)
    if isinstance(scores, SecondOrderScores):  # trigram[A, 1 + p, c] reads y_{t-1} = p, y_t = c; [0, 0, c] y_0 = c
        moves = torch.zeros(m + 1, m + 1, m, dtype=torch.bool, device=device)
        moves[:, 1:] = forbidden
        if first is None:
            moves[0, 0] = ~allowed.start
        every = torch.ones(batch, dtype=torch.bool, device=device)
        emissions = _rules_on_emissions(emissions, allowed, lengths, first, every if last is None else last)
        return SecondOrderScores(emissions, scores.trigram.masked_fill(moves, minus_inf))
    order = scores.dim() - 3
    if order not in (1, 2):
        raise ValueError(f"potentials must be (B, N, M, M) or (B, N, M, M, M), got {tuple(scores.shape)}")
    # a 0 / -inf bias on the transitions from token 1 on (token 0 reads the start state, not a previous
    # label), added in one pass (nothing for the backward pass); the start and end rules onto the first
    # and last tokens' slices in place
    moves = forbidden.reshape(1, 1, *((1,) * (order - 1)), m, m) & (torch.arange(n, device=device) > 0).reshape(
        1, n, *((1,) * (order + 1)))
    zero = scores.new_zeros(())
    out = scores + zero.masked_fill(moves, minus_inf)
    rows = torch.arange(batch, device=device)
    every = torch.ones(batch, dtype=torch.bool, device=device)
    for flags, rule, token in ((first, allowed.start, torch.zeros_like(lengths)), (last, allowed.end, lengths - 1)):
        if bool(rule.all()) or n == 0:
            continue
        chosen = (every if flags is None else flags) & (lengths > 0)
        bias = zero.masked_fill(chosen[:, None] & ~rule, minus_inf)  # (B, M)
        out.index_put_((rows, token.clamp_min(0)), bias.reshape(batch, *((1,) * order), m), accumulate=True)
    return out


def valid_decode(token_scores: Tensor, lengths: Tensor, allowed: Transitions, first: Optional[Tensor] = None,
                 last: Optional[Tensor] = None) -> Decoded:
    """The valid label sequence maximising the sum of ``token_scores`` (B, N, M) over its tokens:
    :func:`~.chain.crf_viterbi` on the constrained chain of these emissions and zero transitions. Score
    -inf and labels 0 for a sentence no valid sequence fits."""
    m = token_scores.shape[-1]
    chain = ChainScores(token_scores, token_scores.new_zeros(m, m))
    return crf_viterbi(constrain(chain, allowed, lengths, first, last), lengths)


def _prefixes(scheme: str) -> Tuple[str, ...]:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return _PREFIXES[scheme]


def _parse(label: str, scheme: str) -> Tuple[str, str]:
    """(prefix, type) of a label; ("O", "") for O."""
    prefixes = _prefixes(scheme)
    if label == "O":
        return "O", ""
    prefix, _, kind = label.partition("-")
    if prefix not in prefixes or not kind:
        raise ValueError(f"label {label!r} is neither 'O' nor PREFIX-TYPE with PREFIX one of {prefixes} ({scheme})")
    return prefix, kind


def _checked(allowed: Transitions, m: int, device) -> Transitions:
    shapes = {"start": (m,), "transitions": (m, m), "end": (m,)}
    for name, value in zip(Transitions._fields, allowed):
        if not isinstance(value, Tensor) or value.dtype != torch.bool or tuple(value.shape) != shapes[name]:
            got = f"{value.dtype} {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"allowed.{name} must be a bool tensor of shape {shapes[name]}, got {got}")
    return Transitions(*(value.to(device) for value in allowed))


def _flags(flags: Optional[Tensor], batch: int, device) -> Optional[Tensor]:
    if flags is None:
        return None
    if not isinstance(flags, Tensor) or flags.dtype != torch.bool or tuple(flags.shape) != (batch,):
        raise ValueError(f"first and last must be bool tensors of shape ({batch},)")
    return flags.to(device)


def _rules_on_emissions(emissions: Tensor, allowed: Transitions, lengths: Tensor, first: Optional[Tensor],
                        last: Optional[Tensor]) -> Tensor:
    """The emissions with the start rule on the sequences with ``first`` and the end rule on those with
    ``last`` (None: nobody); the same tensor where that changes nothing."""
    if first is None and (last is None or bool(allowed.end.all())):
        return emissions
    nobody = torch.zeros(emissions.shape[0], dtype=torch.bool, device=emissions.device)
    ends = _forbidden_ends(allowed, lengths, emissions.shape[1], nobody if first is None else first,
                           nobody if last is None else last)
    return emissions.masked_fill(ends, float("-inf"))


def _forbidden_ends(allowed: Transitions, lengths: Tensor, n: int, first: Tensor, last: Tensor) -> Tensor:
    """(B, N, M) bool: the labels the start rule forbids at token 0 of the sequences with ``first``, and
    the end rule at the last real token of those with ``last``."""
    positions = torch.arange(n, device=lengths.device)[None, :]
    at_start = (positions == 0) & (lengths > 0)[:, None] & first[:, None]
    at_end = (positions == (lengths - 1)[:, None]) & last[:, None]
    return (at_start[:, :, None] & ~allowed.start) | (at_end[:, :, None] & ~allowed.end)
