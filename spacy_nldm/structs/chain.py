"""Linear-chain CRFs of order 1 and 2: the paper's baselines. A reader starts here.

``potentials`` hold every score of the chain, emissions and transitions together:

- order 1: shape (B, N, M, M); ``potentials[b, t, a, c]`` scores label c at token t (0-based) after
  label a at token t-1. Token 0 follows the start state, read from row a = 0, so start transitions
  live in ``potentials[:, 0, 0, :]``.
- order 2: shape (B, N, M, M, M); ``potentials[b, t, a, p, c]`` scores y_t = c after y_{t-2} = a and
  y_{t-1} = p; missing previous labels are the start state, index 0.

The order is read from ``potentials.dim()``. A first-order chain may also be given factored, as
:class:`ChainScores` (emissions, one transition matrix, start and end scores), and a second-order one as
:class:`~.chain_second.SecondOrderScores` (emissions and one trigram table); both skip building the
potentials. ``lengths`` (B,) is an integer tensor of real token counts; ``label_mask`` (B, N, M) bool
restricts the labels of each token. End transitions are added by the caller into the last real token's
potentials (see :func:`chain_potentials`).

The reference is the recursion below over a semiring (:func:`_recursion`: log-sum-exp for log Z, max for
Viterbi), each step relative to its maximum (exact in float32 at any scale). A state s = (a, p) is the last ``order`` labels, a the
oldest and p the rest (empty for order 1), and one token's potentials read as X_t[a, p, c]:

    alpha_t[(p, c)] = (+)_a alpha_{t-1}[(a, p)] * X_t[a, p, c],    log Z = (+)_s alpha_N[s]

The marginals are the gradient of log Z (autograd of the reference); Viterbi is the same recursion in
the max semiring with back-pointers.
Faster lanes compute the same numbers where they are exact; :func:`_pick` (and, publicly,
:func:`crf_lane`) says which lane runs when:

==========  ====================================================================  ======================
lane        takes                                                                 module
==========  ====================================================================  ======================
gold        log Z under a label_mask that allows one label per real token: the    here (:func:`crf_score`)
            score of that sequence, read off by indexing (no dynamic program)
factored    :class:`ChainScores` (on a GPU only where ``bounded`` does not take   :mod:`.chain_factored`
            its potentials); the sentences it does not trust go to the
            potentials' lane
trigram     :class:`~.chain_second.SecondOrderScores` whose trigram's finite       :mod:`.chain_second`
            entries span at most 200 nats (exp space in float64); wider ones, and
            the sentences it does not trust, go to the reference on their potentials
bounded     order-1 potentials without a label mask, every real token's finite     :mod:`.chain_bounded`
            entries spanning at most 354 nats (float32 run in float64 beyond
            43.7); with -inf, the sentences it does not trust go to the reference
reference   everything else: order-2 potentials, masks, wider tokens               here
==========  ====================================================================  ======================

``lane=`` on :func:`crf_log_partition` and :func:`crf_marginals` forces one (a ValueError where it cannot
take the input); every lane is exact at any score scale, so forcing one changes the speed, not the result.
:func:`crf_viterbi` has its own lanes (:data:`VITERBI_LANES`): ``compiled`` (:mod:`.compiled_chain`, the
default for :class:`ChainScores` on the CPU: one loop per sentence, no potentials; 1.2 against 4.5 us a
word for the reference at B = 256, N <= 40, M = 25, one thread) and the ``reference`` below; both give the same labels and scores bit for bit.

-inf is a structural zero (a forbidden label or transition: :func:`.constraints.constrain` writes them)
that every lane keeps exact. A sentence that no sequence of finite score fits (a token with no allowed
label, or allowed labels no allowed transitions join) has log Z = -inf, zero marginals and gradient, and
:func:`crf_viterbi` returns score -inf and labels 0.
"""
from typing import NamedTuple, Optional, Tuple, Union

import numpy
import torch

from . import chain_bounded, chain_factored, chain_second, compiled, compiled_chain
from .chain_second import SecondOrderScores
from .chain_common import as_steps, real_tokens, start_state
from .checks import Decoded, check_label_mask, check_lengths, check_scores, raise_if_not_finite
from .semiring import LogSemiring, Semiring

Tensor = torch.Tensor

#: the lanes, in the order :func:`_pick` considers them
LANES = ("gold", "factored", "trigram", "bounded", "reference")
#: the lanes of :func:`crf_viterbi` that ``lane=`` forces
VITERBI_LANES = ("compiled", "reference")

#: on a GPU, ChainScores of at most this many potentials (B * N * M * M) take the bounded lane on their
#: potentials where it applies: there a step costs its kernel launches, and the bounded lane's one batched
#: product per token beats the factored lane's five or six operations (H200, B=32, n=30, M=17-25: 2.6-3.7
#: ms against 6.2-9.2 ms for log Z forward and backward, std 1-30; BENCHMARKS.md, results/gpu/)
GPU_POTENTIALS_UP_TO = 1 << 26


class ChainScores(NamedTuple):
    """First-order chain scores, as pytorch-crf and most taggers hold them: ``emissions`` (B, N, M);
    ``transitions`` (M, M) indexed [previous, current], shared by every token; ``start`` (M,) scores the
    first label, ``end`` (M,) the last real one (both optional). Every function here takes them wherever
    it takes potentials."""

    emissions: Tensor
    transitions: Tensor
    start: Optional[Tensor] = None
    end: Optional[Tensor] = None

    def potentials(self, lengths: Tensor) -> Tensor:
        """The same scores as (B, N, M, M) potentials (see :func:`chain_potentials`)."""
        return chain_potentials(self.emissions, self.transitions, lengths, start=self.start, end=self.end)

    def check(self, lengths) -> Tensor:
        """Validate shapes and dtypes; returns ``lengths`` as a long tensor."""
        check_scores(self.emissions, "emissions")
        if self.emissions.dim() != 3:
            raise ValueError(f"emissions must be (B, N, M), got {tuple(self.emissions.shape)}")
        batch, n, m = self.emissions.shape
        for name, value, shape in (("transitions", self.transitions, (m, m)), ("start", self.start, (m,)),
                                   ("end", self.end, (m,))):
            if value is None:
                continue
            check_scores(value, name)
            if tuple(value.shape) != shape or value.dtype != self.emissions.dtype:
                raise ValueError(f"{name} must be {self.emissions.dtype} of shape {shape}, got {value.dtype} "
                                 f"{tuple(value.shape)}")
        return check_lengths(lengths, batch, n, self.emissions.device)


Scores = Union[Tensor, ChainScores, SecondOrderScores]
#: the scores given as factors (each has ``emissions`` and ``potentials(lengths)``)
FACTORED = (ChainScores, SecondOrderScores)


class _Lane(NamedTuple):
    """What :func:`_pick` chose: the lane's ``name`` and, for ``bounded``, the potentials'
    :func:`.chain_bounded.token_spans` it looked at (so that the lane does not compute them again)."""

    name: str
    spans: Optional[chain_bounded.Spans] = None


# -- the public functions ---------------------------------------------------------------------------


def crf_log_partition(potentials: Scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None,
                      lane: Optional[str] = None) -> Tensor:
    """log Z of the chain (or log S with a gold ``label_mask``), shape (B,); differentiable. ``lane``
    forces one of :data:`LANES` (module docstring); by default :func:`_pick` chooses."""
    scores, lengths, mask = _inputs(potentials, lengths, label_mask)
    gold = None if mask is None else _single_labels(mask, lengths)
    chosen = _pick(scores, lengths, mask, gold, lane)
    if chosen.name == "gold":
        log_z = crf_score(scores, gold, lengths)
    elif chosen.name == "factored":
        log_z = _factored_log_partition(_masked(scores, mask), lengths)
    elif chosen.name == "trigram":
        log_z = _trigram_log_partition(scores, lengths, mask)
    else:
        log_z = _log_partition(_potentials(_masked(scores, mask), lengths), lengths, chosen)
    raise_if_not_finite(log_z, lambda b: _bad_position(scores, lengths, b))
    return log_z


def crf_marginals(potentials: Scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None,
                  lane: Optional[str] = None) -> Tensor:
    """P(y_t = c | x), shape (B, N, M), 0 beyond ``lengths`` and for impossible sentences. ``lane``
    forces one of :data:`LANES` but ``gold``."""
    scores, lengths, mask = _inputs(potentials, lengths, label_mask)
    if lane == "gold":
        raise ValueError("lane 'gold' computes log Z only, not marginals")
    chosen = _pick(scores, lengths, mask, None, lane)
    scores = _masked(scores, mask)
    with torch.no_grad():
        if chosen.name == "trigram":
            return _trigram_marginals(scores, lengths)
        if chosen.name == "factored":
            marg = _factored_marginals(scores, lengths)
            if marg is not None:
                return marg
        potentials = _potentials(scores, lengths).detach()
        if chosen.name == "factored":  # the factored lane declined: the potentials' own lane
            chosen = _pick(potentials, lengths, None, None, None)
        marg, log_z = _transition_marginals(potentials, lengths, chosen)
    raise_if_not_finite(log_z, lambda b: _bad_position(scores, lengths, b))
    return _token_label_sums(marg)


def crf_lane(potentials: Scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> str:
    """The lane :func:`crf_log_partition` takes for these inputs (one of :data:`LANES`)."""
    scores, lengths, mask = _inputs(potentials, lengths, label_mask)
    return _pick(scores, lengths, mask, None if mask is None else _single_labels(mask, lengths), None).name


def crf_score(potentials: Scores, labels: Tensor, lengths: Tensor) -> Tensor:
    """Score (B,) of given label sequences ``labels`` (B, N) (values beyond ``lengths`` are ignored);
    differentiable with respect to ``potentials`` (or the tensors of a :class:`ChainScores`)."""
    if isinstance(potentials, ChainScores):
        return _factored_score(potentials, labels, potentials.check(lengths))
    if isinstance(potentials, SecondOrderScores):
        return chain_second.score(potentials, labels, potentials.check(lengths))
    check_scores(potentials, "potentials")
    batch, n = potentials.shape[:2]
    lengths = check_lengths(lengths, batch, n, potentials.device)
    order = potentials.dim() - 3
    real = real_tokens(lengths, n)
    labels = torch.where(real, labels.to(potentials.device).long(), 0)
    start = labels.new_zeros(batch, order)
    history = torch.cat([start, labels], dim=1)  # y_{t-order} .. y_t at columns t .. t + order
    index = [torch.arange(batch, device=labels.device)[:, None], torch.arange(n, device=labels.device)[None, :]]
    index += [history[:, k : k + n] for k in range(order + 1)]
    picked = potentials[tuple(index)]  # (B, N)
    return torch.where(real, picked, 0.0).sum(1)


def crf_viterbi(potentials: Scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None,
                lane: Optional[str] = None) -> Decoded:
    """Best label sequence: :class:`~.checks.Decoded` (labels (B, N), heads None, score (B,)). ``lane``
    forces one of :data:`VITERBI_LANES`: ``compiled`` (:class:`ChainScores` on the CPU, the default there;
    :mod:`.compiled_chain`) or ``reference`` (the recursion below on the potentials); by default
    :class:`~.chain_second.SecondOrderScores` decode in log space without their potentials
    (:func:`.chain_second.viterbi`). Every lane makes the reference's choices, ties included."""
    scores, lengths, mask = _inputs(potentials, lengths, label_mask)
    chosen = _viterbi_lane(scores, lane)
    with torch.no_grad():
        masked = _masked(scores, mask)
        if chosen == "compiled":
            labels, score = compiled_chain.viterbi(masked.emissions, masked.transitions, _start_scores(masked),
                                                   _end_scores(masked), lengths)
        elif chosen == "trigram":
            labels, _, score = chain_second.viterbi(masked, lengths)
        else:
            labels, score = _viterbi(_potentials(masked, lengths).detach(), lengths)
    raise_if_not_finite(score, lambda b: _bad_position(scores, lengths, b))
    return Decoded(labels, None, score)


def _viterbi_lane(scores: Scores, lane: Optional[str]) -> str:
    """The Viterbi lane: ``lane`` if given (a ValueError where it cannot take ``scores``), else compiled for
    ChainScores on the CPU, trigram for SecondOrderScores, the reference for the rest."""
    takes = isinstance(scores, ChainScores) and not scores.emissions.is_cuda and compiled.available()
    if lane is None:
        return "compiled" if takes else "trigram" if isinstance(scores, SecondOrderScores) else "reference"
    if lane not in VITERBI_LANES:
        raise ValueError(f"lane must be one of {VITERBI_LANES} or None, got {lane!r}")
    if lane == "compiled" and not takes:
        raise ValueError("lane 'compiled' cannot take these scores: it needs ChainScores on the CPU (and numba)")
    return lane


def chain_potentials(
    emissions: Tensor,
    transitions: Tensor,
    lengths: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    """Potentials from the usual parametrisation.

    emissions (B, N, M); transitions (M, M) for order 1 or (M, M, M) for order 2, indexed by the
    previous label(s) then the current one; start (M,) scores the first label, end (M,) the last.
    The start state is index 0 of the previous-label axes, so its transition rows are replaced by
    ``start`` at token 0 (and, for order 2, by ``transitions[0]`` as the y_{t-2} of token 1).
    """
    batch, n, m = emissions.shape
    order = transitions.dim() - 1
    if end is not None:  # onto the last real token's emissions
        last = torch.arange(n, device=emissions.device)[None, :] == (lengths.to(emissions.device) - 1)[:, None]
        emissions = torch.where(last[:, :, None], emissions + end, emissions)  # (not 0 * end: end may be -inf)
    first = transitions.new_zeros((1,) * order + (m,)) if start is None else start.reshape((1,) * order + (m,))
    per_token = torch.cat([first.expand(1, *transitions.shape), transitions.expand(max(n - 1, 0), *transitions.shape)])
    return emissions.reshape(batch, n, *((1,) * order), m) + per_token[:n]


# -- the dispatcher ---------------------------------------------------------------------------------


def _pick(scores: Scores, lengths: Tensor, mask: Optional[Tensor], gold: Optional[Tensor], lane: Optional[str]) -> _Lane:
    """The lane for ``scores`` under the label ``mask``; ``gold`` the labels where that mask allows one
    per real token. ``lane`` given: that one, or a ValueError where it cannot take the input.

    - gold first: reading one sequence's score off is the cheapest of all (4-5x the NLL's speed).
    - ChainScores: factored, skipping the (B, N, M, M) potentials (1.3-2.9x against the potentials'
      lanes on the CPU at std 1-100); on a GPU the bounded lane where it takes the potentials
      (:data:`GPU_POTENTIALS_UP_TO`).
    - SecondOrderScores: trigram (0.15-0.3x the reference's time at M = 17-25).
    - order 1 without a mask: bounded where every token spans at most 354 nats (0.35-0.4x the
      reference's time at std 1, M = 17-25); else the reference.
    """
    factored = isinstance(scores, ChainScores)
    trigram = isinstance(scores, SecondOrderScores)
    if lane is not None:
        if lane not in LANES:
            raise ValueError(f"lane must be one of {LANES} or None, got {lane!r}")
        why = None
        if lane == "gold" and gold is None:
            why = "it needs a label_mask allowing exactly one label at every real token"
        elif lane == "factored" and not factored:
            why = "it needs ChainScores"
        elif lane == "trigram" and not (trigram and chain_second.takes(scores)):
            why = (f"it needs SecondOrderScores whose trigram (its finite entries; no +inf or NaN) spans at most "
                   f"{chain_second.SPAN:g} nats")
        elif lane == "bounded" and not chain_bounded.applies(_potentials(_masked(scores, mask), lengths), lengths):
            why = "it needs order-1 scores without +inf or NaN, every token's finite entries spanning at most 354 nats"
        if why is not None:
            raise ValueError(f"lane {lane!r} cannot take these scores: {why}")
        return _Lane(lane)
    if gold is not None:
        return _Lane("gold")
    if trigram:
        return _Lane("trigram" if chain_second.takes(scores) else "reference")
    if factored:
        batch, n, m = scores.emissions.shape
        if scores.emissions.is_cuda and mask is None and batch * n * m * m <= GPU_POTENTIALS_UP_TO:
            if chain_bounded.applies(scores.potentials(lengths), lengths):
                return _Lane("bounded")
        return _Lane("factored")
    if scores.dim() == 5 or mask is not None:
        return _Lane("reference")
    spans = chain_bounded.widest_span(scores, lengths)
    if spans is not None and chain_bounded.takes(spans.span, scores.dtype):
        return _Lane("bounded", spans)
    return _Lane("reference")


def _log_partition(potentials: Tensor, lengths: Tensor, lane: _Lane) -> Tensor:
    """log Z (B,) of potentials by ``lane`` (bounded or the reference), differentiable."""
    if lane.name == "bounded":  # the sentences it does not vouch for (-inf potentials only) on the reference
        log_z, exact = chain_bounded.log_partition(potentials, lengths, lane.spans)
        rows = (~exact).nonzero().squeeze(1)
        if len(rows):
            redone = _recursion(LogSemiring(), potentials[rows], lengths[rows]).to(potentials.dtype)
            log_z = log_z.index_copy(0, rows, redone)
        return log_z
    return _recursion(LogSemiring(), potentials, lengths).to(potentials.dtype)


def _transition_marginals(potentials: Tensor, lengths: Tensor, lane: _Lane) -> Tuple[Tensor, Tensor]:
    """Transition marginals like ``potentials`` (0 beyond the lengths) and log Z (B,), by ``lane``."""
    if lane.name == "bounded":
        marg, log_z, exact = chain_bounded.marginals(potentials, lengths, lane.spans)
        rows = (~exact).nonzero().squeeze(1)
        if len(rows):
            redone, redone_z = _transition_marginals(potentials[rows], lengths[rows], _Lane("reference"))
            marg, log_z = marg.index_copy(0, rows, redone), log_z.index_copy(0, rows, redone_z)
        return marg, log_z
    with torch.enable_grad():
        leaf = potentials.detach().requires_grad_(True)
        log_z = _recursion(LogSemiring(), leaf, lengths)
        (marg,) = torch.autograd.grad(log_z.sum(), leaf)
    return marg, log_z.detach().to(potentials.dtype)


# -- the reference ----------------------------------------------------------------------------------


def _recursion(semiring: Semiring, potentials: Tensor, lengths: Tensor) -> Tensor:
    """The root (B,) float64 of the chain's recursion in ``semiring``; padding tokens keep the state.

    alpha_t grows like t times the scores' scale, so each step keeps it relative to its maximum (a
    constant to autograd: log Z does not depend on where it is taken out) and sums the maxima in float64:
    in float32 its entries then round by an ulp of the scores' size, not of t * std."""
    steps = as_steps(potentials)  # X_t[a, p, c]
    batch, n, m, p, _ = steps.shape
    real = real_tokens(lengths, n)
    alpha = start_state(batch, m * p, steps)
    shift = torch.zeros(batch, dtype=torch.float64, device=steps.device)
    if n == 0:  # no tokens: log Z 0, still a function of the (empty) potentials for autograd
        alpha = alpha + steps.sum()
    for t, step in enumerate(steps.unbind(1)):  # (unbind: one backward op for all tokens, not one per token)
        # alpha_t[(p, c)] = (+)_a alpha_{t-1}[(a, p)] * X_t[a, p, c]
        new = semiring.sum(alpha.reshape(batch, m, p, 1) + step, (1,)).flatten(1)
        top = new.detach().amax(1).clamp_min(torch.finfo(new.dtype).min)
        alpha = torch.where(real[:, t, None], new - top[:, None], alpha)
        shift = shift + torch.where(real[:, t], top, 0.0).to(torch.float64)
    # log Z = (+)_s alpha_N[s]
    return semiring.sum(alpha, (1,)).to(torch.float64) + shift


def _viterbi(potentials: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """The reference recursion in the max semiring with back-pointers (the arg-max of each state's sum),
    then the backtrack from the best final state (in numpy: one tiny gather per token)."""
    steps = as_steps(potentials)
    batch, n, m, p, _ = steps.shape
    v = start_state(batch, m * p, potentials)
    pointers = []
    for t in range(n):
        # alpha_t[(p, c)] = max_a alpha_{t-1}[(a, p)] + X_t[a, p, c]
        best, arg = (v.reshape(batch, m, p, 1) + steps[:, t]).max(dim=1)
        v = torch.where((t < lengths)[:, None], best.flatten(1), v)
        pointers.append(arg.flatten(1))  # a for each new state (p, c)
    score, state = v.max(dim=1)
    labels = torch.zeros(batch, n, dtype=torch.long)
    if n:
        back = torch.stack(pointers, 1).cpu().numpy()
        ends, rows, out = (lengths - 1).cpu().numpy(), numpy.arange(batch), labels.numpy()
        state_np = state.cpu().numpy()
        for t in range(n - 1, -1, -1):
            out[:, t] = state_np % m  # y_t (masked below past the end)
            previous = back[rows, t, state_np] * p + state_np // m  # the state before token t: (a, p)
            state_np = numpy.where(t <= ends, previous, state_np)
    labels = labels.to(potentials.device)
    keep = real_tokens(lengths, n) & (score > float("-inf"))[:, None]
    return labels * keep, score


# -- the factored lanes' inputs and fallbacks ------------------------------------------------------


def _trigram_log_partition(scores: SecondOrderScores, lengths: Tensor, mask: Optional[Tensor]) -> Tensor:
    """log Z by the trigram lane; the sentences it does not trust on their potentials (the reference)."""
    log_z, exact = chain_second.log_partition(scores, lengths, label_mask=mask)
    rows = (~exact).nonzero().squeeze(1)
    if len(rows):
        some = _masked(SecondOrderScores(scores.emissions[rows], scores.trigram), None if mask is None else mask[rows])
        redone = _recursion(LogSemiring(), some.potentials(), lengths[rows]).to(log_z.dtype)
        log_z = log_z.index_copy(0, rows, redone)
    return log_z


def _trigram_marginals(scores: SecondOrderScores, lengths: Tensor) -> Tensor:
    """P(y_t = c) (B, N, M) by the trigram lane; the sentences it does not trust on their potentials."""
    marg, exact = chain_second.marginals(scores, lengths)
    rows = (~exact).nonzero().squeeze(1)
    if len(rows):
        some = SecondOrderScores(scores.emissions[rows], scores.trigram).potentials().detach()
        redone, _ = _transition_marginals(some, lengths[rows], _Lane("reference"))
        marg = marg.index_copy(0, rows, _token_label_sums(redone).to(marg.dtype))
    return marg



def _factored_log_partition(scores: ChainScores, lengths: Tensor) -> Tensor:
    """log Z by the factored lane; the sentences it does not trust (all, where it declines) on their
    potentials, by their own lane."""
    emissions, start = _emissions_with_end(scores, lengths), _start_scores(scores)
    with torch.no_grad():
        fast = chain_factored.fast_path(emissions.detach(), scores.transitions.detach(), start.detach(), lengths)
    rows = chain_factored.untrusted(fast)
    if rows is None:
        return _potentials_log_partition(scores.potentials(lengths), lengths)
    log_z = chain_factored.log_partition(emissions, scores.transitions, start, lengths, fast, _general)
    if len(rows):
        some = scores._replace(emissions=scores.emissions[rows])
        log_z = log_z.index_copy(0, rows, _potentials_log_partition(some.potentials(lengths[rows]), lengths[rows]))
    return log_z


def _factored_marginals(scores: ChainScores, lengths: Tensor) -> Optional[Tensor]:
    """P(y_t = c) (B, N, M) by the factored lane (its untrusted sentences on their potentials), or None
    where it declines."""
    emissions = _emissions_with_end(scores, lengths)
    fast = chain_factored.fast_path(emissions, scores.transitions, _start_scores(scores), lengths)
    rows = chain_factored.untrusted(fast)
    if rows is None:
        return None
    marg = fast.token_marginals.to(emissions.dtype)
    if len(rows):
        potentials = scores._replace(emissions=scores.emissions[rows]).potentials(lengths[rows]).detach()
        redone, _ = _transition_marginals(potentials, lengths[rows], _pick(potentials, lengths[rows], None, None, None))
        marg = marg.index_copy(0, rows, _token_label_sums(redone))
    return marg


def _potentials_log_partition(potentials: Tensor, lengths: Tensor) -> Tensor:
    return _log_partition(potentials, lengths, _pick(potentials, lengths, None, None, None))


def _general(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor) -> Tensor:
    """log Z on the potentials of the factored lane's inputs (its gradients' fallback)."""
    return _potentials_log_partition(chain_potentials(emissions, transitions, lengths, start=start), lengths)


def _factored_score(scores: ChainScores, labels: Tensor, lengths: Tensor) -> Tensor:
    emissions, start = _emissions_with_end(scores, lengths), _start_scores(scores)
    real = real_tokens(lengths, emissions.shape[1])
    labels = torch.where(real, labels.to(emissions.device).long(), 0)
    picked = emissions.gather(2, labels[:, :, None]).squeeze(2)  # (B, N)
    moves = scores.transitions[labels[:, :-1], labels[:, 1:]]  # (B, N-1)
    picked = picked + torch.cat([start[labels[:, :1]], moves], 1)
    return torch.where(real, picked, 0.0).sum(1)


def _emissions_with_end(scores: ChainScores, lengths: Tensor) -> Tensor:
    """The emissions with the end scores on each sentence's last real token."""
    if scores.end is None:
        return scores.emissions
    n = scores.emissions.shape[1]
    last = torch.arange(n, device=lengths.device)[None, :] == (lengths - 1)[:, None]
    return torch.where(last[:, :, None], scores.emissions + scores.end, scores.emissions)  # end may be -inf


def _start_scores(scores: ChainScores) -> Tensor:
    if scores.start is not None:
        return scores.start
    return scores.emissions.new_zeros(scores.emissions.shape[-1])


def _end_scores(scores: ChainScores) -> Tensor:
    if scores.end is not None:
        return scores.end
    return scores.emissions.new_zeros(scores.emissions.shape[-1])


# -- inputs ------------------------------------------------------------------------------------------


def _inputs(potentials: Scores, lengths: Tensor, label_mask: Optional[Tensor]):
    """Checked scores, lengths (long) and label mask (None, or bool on the scores' device)."""
    if isinstance(potentials, FACTORED):
        lengths = potentials.check(lengths)
        mask = check_label_mask(label_mask, tuple(potentials.emissions.shape))
        return potentials, lengths, None if mask is None else mask.to(lengths.device)
    check_scores(potentials, "potentials")
    if potentials.dim() not in (4, 5):
        raise ValueError(
            f"potentials must be (B, N, M, M) for order 1 or (B, N, M, M, M) for order 2, got {tuple(potentials.shape)}"
        )
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    if any(size != m for size in potentials.shape[2:]):
        raise ValueError(f"the label axes of potentials must have equal sizes, got {tuple(potentials.shape)}")
    lengths = check_lengths(lengths, batch, n, potentials.device)
    mask = check_label_mask(label_mask, (batch, n, m))
    return potentials, lengths, None if mask is None else mask.to(potentials.device)


def _masked(scores: Scores, mask: Optional[Tensor]) -> Scores:
    """Disallowed current labels read as -inf (previous labels follow: their alpha is -inf); for
    ChainScores, their emissions."""
    if mask is None:
        return scores
    if isinstance(scores, FACTORED):
        return scores._replace(emissions=scores.emissions.masked_fill(~mask, float("-inf")))
    batch, n, m = mask.shape
    return torch.where(mask.reshape(batch, n, *((1,) * (scores.dim() - 3)), m), scores, float("-inf"))


def _potentials(scores: Scores, lengths: Tensor) -> Tensor:
    return scores.potentials(lengths) if isinstance(scores, FACTORED) else scores


def _single_labels(mask: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """The labels (B, N) if the mask allows exactly one label at every real token, else None."""
    real = real_tokens(lengths, mask.shape[1])
    if not bool(((mask.sum(-1) == 1) | ~real).all()):
        return None
    return mask.to(torch.uint8).argmax(-1)


def _token_label_sums(per_potential: Tensor) -> Tensor:
    """Sum a potentials-shaped tensor over all but (batch, token, current label)."""
    return per_potential.sum(dim=tuple(range(2, per_potential.dim() - 1)))


def _bad_position(scores: Scores, lengths: Tensor, b: int) -> str:
    """Where sentence b's potentials hold +inf or NaN (among its real tokens)."""
    pot = _potentials(scores, lengths)[b, : int(lengths[b])].detach()
    bad = (torch.isnan(pot) | (pot == float("inf"))).nonzero()
    if len(bad) == 0:
        return "its log partition is not finite"
    t, *labels = bad[0].tolist()
    return f"potentials[{b}, {t}, {', '.join(map(str, labels))}] is {pot[tuple(bad[0])].item()}"
