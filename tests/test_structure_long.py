"""Long sentences: the NLDM decodes and takes marginals from the factored scores, never from the dense
(N+1, N+1, M, M) arc tensor, and gives the same results as the dense path."""
import pytest
import torch

from spacy_nldm import structs
from spacy_nldm.models.structure import Chain, LatentTree
from spacy_nldm.structs import canonical_heads


def with_root(label_mask):
    """structs' (B, N+1, M) label mask of a (B, N, M) token mask: the root (position 0) allows every label."""
    return torch.cat([label_mask.new_ones(label_mask.shape[0], 1, label_mask.shape[2]), label_mask], dim=1)


@pytest.mark.parametrize("max_dist", [2, None])
def test_decoding_and_marginals_never_build_the_dense_arc_tensor(monkeypatch, max_dist):
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([40, 17, 33]) if max_dist else torch.tensor([12, 7, 9])
    F = torch.randn(3, int(lengths.max()), 2, 5, 4, generator=gen, dtype=torch.float64)
    tree = LatentTree(max_dist=max_dist, canonical=False)  # Viterbi's own tree, as structs returns it
    dense = tree.expand(F)  # the old path, for reference
    want_marg = structs.marginals(dense, lengths, max_dist=max_dist).labels
    want = structs.viterbi(dense, lengths, max_dist=max_dist)
    want_probs = structs.viterbi(
        dense, lengths, max_dist=max_dist,
        label_mask=with_root(torch.nn.functional.one_hot(want_marg.argmax(-1), 4).bool()),
    )

    def refuse(*args, **kwargs):
        raise AssertionError("the dense (N+1, N+1, M, M) arc tensor was built")

    monkeypatch.setattr(LatentTree, "expand", refuse)
    torch.testing.assert_close(tree.label_marginals(F, lengths), want_marg)
    got = tree.decode(F, lengths)
    assert isinstance(got, structs.Decoded)
    assert torch.equal(got.labels, want.labels) and torch.equal(got.heads, want.heads)
    torch.testing.assert_close(got.score, want.score)
    posterior = tree.decode(F, lengths, posterior=True)
    assert torch.equal(posterior.labels, want_marg.argmax(-1) * (torch.arange(F.shape[1]) < lengths[:, None]))
    assert torch.equal(posterior.heads, want_probs.heads)
    # by default decode returns the canonical tree of the decoded labels, and its score
    for found, want_found in ((LatentTree(max_dist=max_dist).decode(F, lengths), want),
                              (LatentTree(max_dist=max_dist).decode(F, lengths, posterior=True), want_probs)):
        heads, scores = canonical_heads(F, want_found.labels, lengths, max_dist)
        assert torch.equal(found.labels, want_found.labels) and torch.equal(found.heads, heads)
        torch.testing.assert_close(found.score, scores)
        torch.testing.assert_close(found.score, want_found.score, rtol=1e-5, atol=1e-5)


def test_a_long_sentence_decodes_with_arcs_up_to_max_dist():
    n, k = 400, 3
    gen = torch.Generator().manual_seed(1)
    F = torch.randn(1, n, 2, 4, 3, generator=gen)
    got = LatentTree(max_dist=k).decode(F, torch.tensor([n]))
    heads = got.heads[0]
    dependents = torch.arange(1, n + 1)
    assert torch.all((heads - dependents).abs() <= k) and torch.all(heads != dependents)
    # the decoded tree's score is the returned best score
    head_labels = torch.cat([torch.zeros(1, dtype=torch.long), got.labels[0] + 1])[heads]
    direction = (heads > dependents).long()
    total = F[0, dependents - 1, direction, head_labels, got.labels[0]].sum()
    torch.testing.assert_close(total, got.score[0], rtol=1e-5, atol=1e-3)
    marg = LatentTree(max_dist=k).label_marginals(F, torch.tensor([n]))
    torch.testing.assert_close(marg.sum(-1), torch.ones(1, n))


@pytest.mark.parametrize("structure", [LatentTree(max_dist=2), Chain(order=1)], ids=["nldm", "crf"])
def test_posterior_decoding_reads_the_marginals_it_is_given(structure):
    """decode(marginals=label_marginals(F)) is decode(posterior) exactly (what the component does with
    store_probs, computing them once); marginals from elsewhere are what it decodes."""
    torch.manual_seed(3)
    n_heads = 2 if structure.has_tree else 1
    F = torch.randn(3, 5, n_heads, 5, 4, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 4])
    plain = structure.decode(F, lengths, posterior=True)
    given = structure.decode(F, lengths, posterior=True, marginals=structure.label_marginals(F, lengths))
    assert torch.equal(plain.labels, given.labels)
    assert (plain.heads is None and given.heads is None) or torch.equal(plain.heads, given.heads)
    torch.testing.assert_close(plain.score, given.score)
    chosen = torch.randint(0, 4, (3, 5)) * (torch.arange(5) < lengths[:, None])
    forced = structure.decode(F, lengths, posterior=True,
                              marginals=torch.nn.functional.one_hot(chosen, 4).to(F.dtype))
    assert torch.equal(forced.labels, chosen)


@pytest.mark.parametrize("posterior", [True, False])
def test_an_impossible_segment_decodes_to_zeros_and_leaves_the_others_alone(posterior):
    """A segment no tree can carry (every arc -inf) gets labels and heads 0 and score -inf, as structs'
    decoders leave it; the other segments of the batch decode as they do alone."""
    torch.manual_seed(5)
    F = torch.randn(2, 4, 2, 4, 3, dtype=torch.float64)
    F[1] = float("-inf")
    lengths = torch.tensor([4, 3])
    tree = LatentTree(max_dist=2)
    both = tree.decode(F, lengths, posterior=posterior)
    alone = tree.decode(F[:1], lengths[:1], posterior=posterior)
    assert both.labels[1].eq(0).all() and both.heads[1].eq(0).all() and both.score[1] == float("-inf")
    assert torch.equal(both.labels[:1], alone.labels) and torch.equal(both.heads[:1], alone.heads)
    torch.testing.assert_close(both.score[:1], alone.score)
