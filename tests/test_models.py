"""Edge scorers, the expansion of factored scores to structs' tensors, and the structured losses."""
import itertools

import pytest
import torch

from brute import expand_directional
from spacy_nldm.models.scorers import SCORERS, make_scorer
from spacy_nldm.models.structure import Chain, LatentTree, length_buckets


def central_difference(loss, param, index, eps=1e-6):
    """(loss() at param[index] + eps − loss() at param[index] − eps) / (2 eps); ``param`` is left as it was."""
    with torch.no_grad():
        param[index] += eps
        up = loss()
        param[index] -= 2 * eps
        down = loss()
        param[index] += eps
    return float(up - down) / (2 * eps)


def band(N, k):
    pos = torch.arange(N + 1)
    dist = (pos[:, None] - pos[None, :]).abs()
    return ((dist <= (k or N)) | (pos[:, None] == 0))[None, :, :, None, None]


@pytest.mark.parametrize("N,k", [(1, None), (2, 1), (4, None), (6, 2), (7, 5)])
def test_tree_expansion_matches_definition_and_gradient(N, k):
    torch.manual_seed(N)
    F = torch.randn(2, N, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    got, want = LatentTree(max_dist=k).expand(F), expand_directional(F)
    mask = band(N, k)
    assert torch.equal(got * mask, want * mask)
    g = torch.randn_like(got) * mask
    assert torch.allclose(torch.autograd.grad(got, F, g)[0], torch.autograd.grad(want, F, g)[0])


def test_chain_expansion_matches_definition():
    torch.manual_seed(0)
    M, N = 3, 4
    F1 = torch.randn(2, N, 1, M + 1, M)
    pot = Chain(order=1).expand(F1)
    assert torch.equal(pot[:, 0, 0], F1[:, 0, 0, 0])  # start row
    assert torch.equal(pot[:, 2, 1], F1[:, 2, 0, 2])  # previous label 1 = context 2
    F2 = torch.randn(2, N, M + 1, M + 1, M)
    pot2 = Chain(order=2).expand(F2)
    assert pot2.shape == (2, N, M, M, M)
    assert torch.equal(pot2[:, 0, 0, 0], F2[:, 0, 0, 0])
    assert torch.equal(pot2[:, 1, 0, 2], F2[:, 1, 0, 3])  # y_{-1} = start, y_0 = 2
    assert torch.equal(pot2[:, 3, 1, 2], F2[:, 3, 2, 3])


def all_labelings(n, m):
    return [torch.tensor(y) for y in itertools.product(range(m), repeat=n)]


#: a distance bias (2, K): arcs of length 1, 2 and longer, head on the left / on the right
BIAS = torch.tensor([[0.7, -1.2, 0.3], [0.4, 2.0, -0.5]], dtype=torch.float64)


@pytest.mark.parametrize(
    "structure,shape",
    [(LatentTree(None), (2, 4)), (LatentTree(1), (2, 4)), (LatentTree(2), (2, 4)), (Chain(1), (1, 4)), (Chain(2), (4, 4)),
     (LatentTree(None, distance_bias=BIAS), (2, 4)), (LatentTree(2, distance_bias=BIAS[:, :2]), (2, 4))],
)
def test_nll_is_a_normalised_distribution_and_partial_labels_marginalise(structure, shape):
    torch.manual_seed(1)
    n, m = 3, 3
    F = torch.randn(1, n, *shape, m, dtype=torch.float64)
    lengths = torch.tensor([n])
    probs = {}
    for y in all_labelings(n, m):
        gold = torch.nn.functional.one_hot(y, m).bool()[None]
        probs[tuple(y.tolist())] = float(torch.exp(-structure.nll(F, lengths, gold)))
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-9)
    # a partial label (token 1 unknown) gives the summed probability of the consistent labelings
    partial = torch.ones(1, n, m, dtype=torch.bool)
    partial[0, 0] = torch.tensor([False, True, False])
    partial[0, 2] = torch.tensor([True, False, False])
    want = sum(p for y, p in probs.items() if y[0] == 1 and y[2] == 0)
    assert float(torch.exp(-structure.nll(F, lengths, partial))) == pytest.approx(want, rel=1e-9)
    # offsets on log S weight each consistent labeling by exp(its summed offsets)
    offsets = torch.randn(1, n, m, dtype=torch.float64)
    weighted = sum(p * float(torch.exp(offsets[0, torch.arange(n), torch.tensor(y)].sum()))
                   for y, p in probs.items() if y[0] == 1 and y[2] == 0)
    tilted = float(torch.exp(-structure.nll(F, lengths, partial, gold_offsets=offsets)))
    assert tilted == pytest.approx(weighted, rel=1e-9)
    # no label known: log Z - log Z
    assert float(structure.nll(F, lengths, torch.ones(1, n, m, dtype=torch.bool))) == pytest.approx(0, abs=1e-9)
    # marginals agree with the enumeration, and posterior decoding takes their arg-max
    marg = structure.label_marginals(F, lengths)[0]
    for t in range(n):
        for c in range(m):
            assert float(marg[t, c]) == pytest.approx(sum(p for y, p in probs.items() if y[t] == c), abs=1e-9)
    labels, _, _ = structure.decode(F, lengths, posterior=True)
    assert labels[0].tolist() == marg.argmax(-1).tolist()


@pytest.mark.parametrize("k", [None, 2])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gold_label_loss_equals_the_per_bucket_restricted_loss(k, with_bias):
    """The fully labelled fast path (log S on gathered gold arcs, whole batch) against the general one,
    for F and the distance bias."""
    from spacy_nldm.models.structure import Structure

    torch.manual_seed(4)
    F = torch.randn(4, 6, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    start = BIAS
    bias = start.clone().requires_grad_(True)
    lengths = torch.tensor([6, 2, 0, 4])
    gold = torch.nn.functional.one_hot(torch.randint(0, 4, (4, 6)), 4).bool()
    gold[1, 2:] = True  # padding may allow anything
    tree = LatentTree(max_dist=k, budget=600, distance_bias=bias if with_bias else None)  # several buckets
    fast = tree.nll(F, lengths, gold)
    general = Structure.nll(tree, F, lengths, gold)
    torch.testing.assert_close(fast, general)
    torch.testing.assert_close(torch.autograd.grad(fast, F)[0], torch.autograd.grad(general, F)[0])
    if with_bias:
        grad = torch.autograd.grad(tree.nll(F, lengths, gold), bias)[0]
        torch.testing.assert_close(grad, torch.autograd.grad(Structure.nll(tree, F, lengths, gold), bias)[0])
        # against finite differences
        moved = start.clone()
        loss = lambda: LatentTree(max_dist=k, distance_bias=moved).nll(F.detach(), lengths, gold)  # noqa: E731
        for index in itertools.product(range(2), range(3)):
            assert float(grad[index]) == pytest.approx(central_difference(loss, moved, index), abs=1e-6)
        assert bool((grad != 0).any())


def test_max_approximation_bounds_the_exact_loss():
    torch.manual_seed(2)
    F = torch.randn(3, 5, 2, 5, 4, dtype=torch.float64)
    lengths = torch.tensor([5, 3, 1])
    gold = torch.nn.functional.one_hot(torch.randint(0, 4, (3, 5)), 4).bool()
    tree = LatentTree(max_dist=3)
    assert float(tree.nll(F, lengths, gold, approx="max")) > float(tree.nll(F, lengths, gold))


def test_viterbi_tree_is_well_formed():
    torch.manual_seed(3)
    F = torch.randn(2, 6, 2, 4, 3)
    labels, heads, best = LatentTree(max_dist=2).decode(F, torch.tensor([6, 4]))
    for b, n in enumerate([6, 4]):
        h = [0] + heads[b, :n].tolist()  # h[d]: the head of token d (1-based), 0 the root
        for d in range(1, n + 1):  # every token reaches the root: no cycle
            seen, x = set(), d
            while x != 0:
                assert x not in seen and 1 <= x <= n
                seen.add(x)
                x = h[x]
        arcs = [(min(d, h[d]), max(d, h[d])) for d in range(1, n + 1)]
        assert not [(a, b_) for a, b_ in arcs for c, e in arcs if a < c < b_ < e]  # projective: no crossing arcs
        assert all(abs(d - h[d]) <= 2 for d in range(1, n + 1))  # max_dist, root arcs included
        y = [0] + [int(c) + 1 for c in labels[b, :n]]  # F's head-label row: 0 for the root, 1 + label
        score = sum(float(F[b, d - 1, int(h[d] > d), y[h[d]], y[d] - 1]) for d in range(1, n + 1))
        assert abs(score - float(best[b])) < 1e-4  # the returned score is the tree's, arc by arc
        assert heads[b, n:].eq(0).all() and labels[b, n:].eq(0).all()
    assert heads.shape == labels.shape == (2, 6) and best.shape == (2,)


def test_buckets_cover_and_respect_budget():
    lengths = [5, 0, 30, 7, 7, 100, 2]
    groups = length_buckets(lengths, lambda n: n * n, budget=2000)
    assert sorted(i for g in groups for i in g) == [0, 2, 3, 4, 5, 6]
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) ** 2 <= 2000


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize("order", [1, 2])
def test_scorer_resize_keeps_trained_labels_and_state_dict_adapts(name, order):
    torch.manual_seed(4)
    scorer = make_scorer(name, n_dirs=1 if order == 2 else 2, label_dim=6, rank=8, order=order)
    scorer.resize(5, 3)
    for p in scorer.parameters():  # make every parameter matter
        torch.nn.init.normal_(p)
    h = torch.randn(2, 4, 5)
    before = scorer(h)
    scorer.resize(5, 4)
    after = scorer(h)
    assert after.shape[-1] == 4 and after.shape[-2] == 5
    assert torch.allclose(after[..., :4, :3] if order == 1 else after[:, :, :4, :4, :3], before, atol=1e-4)
    fresh = make_scorer(name, n_dirs=1 if order == 2 else 2, label_dim=6, rank=8, order=order)
    fresh.load_state_dict(scorer.state_dict())
    assert (fresh.nI, fresh.nO) == (5, 4)
    assert torch.equal(fresh(h), after)


def test_unknown_scorer_is_an_error():
    with pytest.raises(ValueError, match="edge_scorer"):
        make_scorer("quadrilinear", n_dirs=2, label_dim=4, rank=4)


INTERACTIONS = {"emission_transition": ["psi"], "bilinear": ["A"], "trilinear": ["U3"]}


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize(
    "structure,n_dirs,order",
    [(LatentTree(None), 2, 1), (LatentTree(3), 2, 1), (LatentTree(1), 2, 1), (Chain(1), 1, 1), (Chain(2), 1, 2),
     (LatentTree(3, distance_bias=BIAS), 2, 1)],
)
def test_zero_interactions_are_the_softmax_tagger(name, structure, n_dirs, order):
    """With the interaction (transition) parameters at zero, label marginals are a softmax over the
    emissions h W + b, the loss is the softmax cross-entropy and decoding is the per-token arg-max,
    for the chains and the latent tree alike (the tree count, and any distance bias, cancels)."""
    torch.manual_seed(5)
    scorer = make_scorer(name, n_dirs=n_dirs, label_dim=4, rank=6, order=order).double()
    scorer.resize(7, 5)
    for p in scorer.parameters():
        torch.nn.init.normal_(p)
    first = scorer.first if order == 2 else scorer
    with torch.no_grad():
        for param in INTERACTIONS[name] + (["psi2"] if order == 2 else []):
            getattr(scorer if param == "psi2" else first, param).zero_()
    if order == 2:  # the second-order table is read from the scorer, F is first-order sized
        structure = Chain(2, token_independent=scorer.token_independent, trigram=scorer.psi2)
    h = torch.randn(3, 6, 7, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1])
    F = scorer(h)
    emissions = h @ first.W + first.b  # (3, 6, 5)
    real = torch.arange(6)[None, :] < lengths[:, None]
    marg = structure.label_marginals(F, lengths)
    torch.testing.assert_close(marg[real], emissions.softmax(-1)[real])
    gold_labels = torch.randint(0, 5, (3, 6))
    gold = torch.nn.functional.one_hot(gold_labels, 5).bool()
    cross_entropy = torch.nn.functional.cross_entropy(emissions[real], gold_labels[real], reduction="sum")
    torch.testing.assert_close(structure.nll(F, lengths, gold), cross_entropy)
    labels, _, _ = structure.decode(F, lengths)
    assert labels[real].tolist() == emissions.argmax(-1)[real].tolist()


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize("order", [1, 2])
def test_the_factored_chain_gives_the_same_loss_gradients_and_decoding(name, order):
    """A Chain with token_independent = true (structs.ChainScores, or SecondOrderScores for order 2, read off
    F) against the potentials' path: loss (label smoothing included), every parameter's gradient, marginals
    and both decoders, with partial labels; a scorer whose interaction reads the token (trilinear) says so
    and keeps the potentials."""
    torch.manual_seed(6)
    scorer = make_scorer(name, n_dirs=1, label_dim=4, rank=6, order=order).double()
    scorer.resize(7, 5)
    for p in scorer.parameters():
        torch.nn.init.normal_(p)
    assert scorer.token_independent == (name != "trilinear")
    h = torch.randn(4, 6, 7, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1, 5])
    gold = torch.nn.functional.one_hot(torch.randint(0, 5, (4, 6)), 5).bool()
    gold[3, 2] = True  # token 2 of sentence 3: any label
    trigram = scorer.psi2 if order == 2 else None
    factored = Chain(order, token_independent=scorer.token_independent, budget=60, trigram=trigram)
    general = Chain(order, budget=60, trigram=trigram)
    if name == "trilinear":
        assert factored.factored(scorer(h)) is None
        return
    assert factored.factored(scorer(h)) is not None
    for smoothing in (0.0, 0.1):
        losses = [structure.nll(scorer(h), lengths, gold, smoothing=smoothing) for structure in (factored, general)]
        torch.testing.assert_close(losses[0], losses[1])
        params = list(scorer.parameters())
        for a, b in zip(torch.autograd.grad(losses[0], params), torch.autograd.grad(losses[1], params)):
            torch.testing.assert_close(a, b)
    F = scorer(h).detach()
    torch.testing.assert_close(factored.label_marginals(F, lengths), general.label_marginals(F, lengths))
    for posterior in (False, True):
        got, want = factored.decode(F, lengths, posterior), general.decode(F, lengths, posterior)
        assert torch.equal(got.labels, want.labels)
        torch.testing.assert_close(got.score, want.score)


@pytest.mark.parametrize("kind", ["tree", "tree k=2, bias", "chain", "chain order 2"])
@pytest.mark.parametrize("name", ["bilinear", "emission_transition"])
def test_emissions_with_the_interaction_table_are_the_full_scores(kind, name):
    """A structure given the token-independent scorer's interaction table reads emissions (S, L, M) as the full
    scores emissions + table: the same loss (label smoothing, partial labels and the max loss included), every
    parameter's gradient, label marginals and decoding (labels, trees and scores) as on the full F."""
    torch.manual_seed(7)
    tree = kind.startswith("tree")
    scorer = make_scorer(name, n_dirs=2 if tree else 1, label_dim=4, rank=6, order=2 if "order 2" in kind else 1,
                         distance_lengths=2 if "bias" in kind else 0).double()
    scorer.resize(7, 5)
    for p in scorer.parameters():
        torch.nn.init.normal_(p)
    h = torch.randn(4, 6, 7, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1, 5])
    gold = torch.nn.functional.one_hot(torch.randint(0, 5, (4, 6)), 5).bool()
    partial = gold.clone()
    partial[3, 2] = True  # token 2 of sentence 3: any label

    def structures(tables):
        def make(**kw):
            if tree:
                return LatentTree(max_dist=2 if "k=2" in kind else None, budget=600,
                                  distance_bias=tables.get("distance_bias"), **kw)
            return Chain(2 if "order 2" in kind else 1, budget=60, trigram=tables.get("trigram"), **kw)

        return make(), make(interaction=tables["interaction"])

    offsets = torch.randn(4, 6, 5, dtype=torch.float64)
    for mask, smoothing, approx, added in ((gold, 0.0, "exact", None), (gold, 0.1, "exact", None),
                                           (partial, 0.1, "exact", None), (gold, 0.0, "max" if tree else "exact", None),
                                           (partial, 0.0, "exact", offsets)):
        emissions, tables = scorer(h, factored=True)
        full, factored = structures(tables)
        losses = [full.nll(scorer(h), lengths, mask, approx=approx, smoothing=smoothing, gold_offsets=added),
                  factored.nll(emissions, lengths, mask, approx=approx, smoothing=smoothing, gold_offsets=added)]
        torch.testing.assert_close(losses[1], losses[0])
        params = list(scorer.parameters())
        for a, b in zip(torch.autograd.grad(losses[1], params, allow_unused=True),
                        torch.autograd.grad(losses[0], params, allow_unused=True)):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)
    with torch.no_grad():
        emissions, tables = scorer(h, factored=True)
        full, factored = structures(tables)
        F = scorer(h)
        torch.testing.assert_close(factored.label_marginals(emissions, lengths), full.label_marginals(F, lengths))
        for posterior in (False, True):
            got, want = factored.decode(emissions, lengths, posterior), full.decode(F, lengths, posterior)
            assert torch.equal(got.labels, want.labels)
            assert (got.heads is None) == (want.heads is None)
            if got.heads is not None:
                assert torch.equal(got.heads, want.heads)
            torch.testing.assert_close(got.score, want.score)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_a_fresh_scorer_starts_at_zero_scores(name):
    """Emission and interaction start at zero, as spaCy's tagger's output layer does."""
    scorer = make_scorer(name, n_dirs=2, label_dim=4, rank=6)
    scorer.resize(7, 5, keep=False)
    assert torch.equal(scorer(torch.randn(2, 3, 7)), torch.zeros(2, 3, 2, 6, 5))


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize("order", [1, 2])
def test_scorer_dropout_acts_on_the_input_vectors_in_training_mode_only(name, order):
    """``dropout`` p: in training mode the scores are those of the same weights on the input vectors with
    torch's inverted-dropout mask (zeros, survivors scaled by 1 / (1 - p)); in eval mode (thinc's predict)
    they are the scores without dropout."""
    torch.manual_seed(7)
    n_dirs = 1 if order == 2 else 2
    dropped = make_scorer(name, n_dirs=n_dirs, label_dim=4, rank=6, order=order, dropout=0.4).double()
    plain = make_scorer(name, n_dirs=n_dirs, label_dim=4, rank=6, order=order).double()
    for scorer in (dropped, plain):
        scorer.resize(7, 5)
    for p in dropped.parameters():
        torch.nn.init.normal_(p)
    plain.load_state_dict(dropped.state_dict())
    h = torch.randn(3, 6, 7, dtype=torch.float64)
    torch.manual_seed(8)
    got = dropped.train()(h)
    torch.manual_seed(8)
    mask = torch.nn.functional.dropout(torch.ones_like(h), 0.4)
    assert 0 < int((mask == 0).sum()) < mask.numel() and torch.allclose(mask[mask > 0], torch.tensor(1 / 0.6).double())
    torch.testing.assert_close(got, plain(h * mask))
    assert not torch.allclose(got, plain(h))
    torch.testing.assert_close(dropped.eval()(h), plain(h))


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_scorer_dropout_outside_0_1_is_an_error(rate):
    with pytest.raises(ValueError, match="dropout must be in"):
        make_scorer("bilinear", n_dirs=2, label_dim=4, rank=6, dropout=rate)


@pytest.mark.parametrize("kind", sorted(SCORERS))
@pytest.mark.parametrize("sizes", [{"label_dim": 0}, {"label_dim": -1}, {"rank": 0}, {"label_dim": 2.5}])
def test_scorer_sizes_below_one_are_an_error_naming_them(kind, sizes):
    settings = {"label_dim": 4, "rank": 6, **sizes}
    (name,) = sizes
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        make_scorer(kind, n_dirs=2, **settings)


def test_a_bilstm_of_odd_width_is_an_error():
    from spacy_nldm.models.lstm import packed_lstm

    with pytest.raises(ValueError, match="width must be even"):
        packed_lstm(nO=7, nI=7)
    assert packed_lstm(nO=8, nI=7).get_dim("nO") == 8


def test_pure_trilinear_has_no_emission_and_starts_random():
    pure = make_scorer("trilinear", n_dirs=2, label_dim=4, rank=6, emission=False)
    pure.resize(7, 5, keep=False)
    assert not hasattr(pure, "W") and float(pure(torch.randn(2, 3, 7)).abs().max()) > 0
    with pytest.raises(ValueError, match="emission"):
        make_scorer("emission_transition", n_dirs=2, label_dim=4, rank=6, emission=False)


def test_optimizer_averages_reach_the_torch_head():
    """nlp.use_params(optimizer.averages) (what spacy train evaluates and saves with use_averages)
    puts the averaged weights into the torch edge scorer too, and restores the last ones after."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example
    from thinc.api import Adam

    from spacy_nldm.models.tagger import torch_scorer

    nlp = spacy.blank("en")
    tok2vec = {"@architectures": "spacy.HashEmbedCNN.v2", "pretrained_vectors": None, "width": 16, "depth": 1,
               "embed_size": 100, "window_size": 1, "maxout_pieces": 2, "subword_features": False}
    pipe = nlp.add_pipe("crf_tagger", config={"model": {"edge_scorer": "emission_transition", "tok2vec": tok2vec}})
    words = [["a", "b", "c"], ["b", "a"], ["c", "c", "a", "b"]]
    tags = [["X", "Y", "Z"], ["Y", "X"], ["Z", "Z", "X", "Y"]]
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in zip(words, tags)]
    optimizer = Adam(0.01, use_averages=True)
    nlp.initialize(lambda: egs, sgd=optimizer)
    for _ in range(5):
        nlp.update(egs, sgd=optimizer)
    head = pipe.model.get_ref("head").shims[0]
    scorer = torch_scorer(pipe.model)
    last = scorer.W.detach().clone()
    averaged = torch.from_numpy(optimizer.averages[(head.id, "W")])
    assert not torch.allclose(last, averaged)
    with nlp.use_params(optimizer.averages):
        torch.testing.assert_close(scorer.W.detach(), averaged)
    torch.testing.assert_close(scorer.W.detach(), last)


@pytest.mark.parametrize("order", [1, 2])
def test_the_scorer_gives_its_tables_beside_the_scores(order):
    """``factored`` gives (scores, tables by name): a token-independent scorer's emissions (..., M) with its
    "interaction" (X, C, M), whose sum is F; the tree's distance bias (2, K), starting at zero, or the
    second-order chain's trigram table, the parameters themselves (the loss's gradient reaches them through
    them); a scorer whose interaction reads the token gives F itself."""
    scorer = make_scorer("bilinear", n_dirs=1 if order == 2 else 2, label_dim=4, rank=6, order=order,
                         distance_lengths=0 if order == 2 else 3)
    scorer.resize(7, 5)
    for p in scorer.parameters():
        torch.nn.init.normal_(p)
    h = torch.randn(2, 3, 7)
    emissions, tables = scorer(h, factored=True)
    assert emissions.shape == (2, 3, 5)
    torch.testing.assert_close(emissions[..., None, None, :] + tables["interaction"], scorer(h))
    if order == 2:
        assert list(tables) == ["interaction", "trigram"] and tables["trigram"] is scorer.psi2
    else:
        assert list(tables) == ["interaction", "distance_bias"] and tables["distance_bias"] is scorer.distance_bias
    fresh = make_scorer("bilinear", n_dirs=2, label_dim=4, rank=6, distance_lengths=3)
    fresh.resize(7, 5)
    assert torch.equal(fresh.distance_bias.detach(), torch.zeros(2, 3))
    plain = make_scorer("emission_transition", n_dirs=2, label_dim=4, rank=6)
    plain.resize(7, 5)
    assert list(plain(h, factored=True)[1]) == ["interaction"] and plain(h, factored=True)[1]["interaction"] is plain.psi
    trilinear = make_scorer("trilinear", n_dirs=2, label_dim=4, rank=6)
    trilinear.resize(7, 5)
    F, tables = trilinear(h, factored=True)
    assert torch.equal(F, trilinear(h)) and tables == {}


@pytest.mark.parametrize("label_dim,rank", [(3, 5), (7, 2)])
def test_label_dim_and_rank_are_the_sizes_the_interactions_contract(label_dim, rank):
    """``label_dim`` D_t is the label embeddings' size (the root/start context first), the bilinear form is
    D_t x D_t per direction, and ``rank`` D_r is the trilinear form's rank: a rank-D_r interaction, so the
    (contexts x labels) block of one token and direction has rank at most D_r."""
    bilinear = make_scorer("bilinear", n_dirs=2, label_dim=label_dim, rank=rank)
    bilinear.resize(4, 6)
    assert tuple(bilinear.label_emb.shape) == (7, label_dim) and tuple(bilinear.A.shape) == (2, label_dim, label_dim)
    trilinear = make_scorer("trilinear", n_dirs=2, label_dim=label_dim, rank=rank, emission=False).double()
    trilinear.resize(4, 6)
    F = trilinear(torch.randn(3, 4, dtype=torch.float64))  # (3, X, C, M)
    assert tuple(trilinear.U1.shape) == (4, rank)
    assert int(torch.linalg.matrix_rank(F[0, 0])) == min(rank, label_dim, 6)


def test_structure_and_smoothing_do_not_import_each_other():
    """No import cycle between the structures and label smoothing (both read models/layout.py)."""
    import ast
    import inspect

    from spacy_nldm.models import smoothing, structure

    def imported(module):
        names = set()
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.ImportFrom):
                names.add((node.module or "").split(".")[-1])
        return names

    assert "structure" not in imported(smoothing) and "smoothing" in imported(structure)
