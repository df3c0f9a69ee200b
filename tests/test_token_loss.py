"""The auxiliary per-token loss (spacy_nldm.models.token_loss, component setting ``token_loss``): its
gradient is spaCy's tagger's on the first context's scores, finite differences agree, unknown and padded
tokens add nothing, and the component adds it with its weight."""
import numpy
import pytest
import spacy
import torch
from spacy.training import Example
from spacy.util import fix_random_seed
from thinc.api import SequenceCategoricalCrossentropy

from spacy_nldm.models.token_loss import token_cross_entropy


def _batch(lengths, m, contexts=(2, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    F = torch.randn(len(lengths), max(lengths), *contexts, m, generator=g, dtype=torch.float64, requires_grad=True)
    gold = torch.randint(0, m, (len(lengths), max(lengths)), generator=g)
    return F, torch.tensor(lengths), gold, torch.nn.functional.one_hot(gold, m).bool()


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.3])
def test_gradient_is_spacys_tagger_gradient_on_the_first_context(alpha):
    """d loss / d F[s, i, 0, 0] = softmax - thinc's smoothed target for every real token; 0 elsewhere."""
    m, lengths = 5, [4, 1, 3]
    F, lens, gold, mask = _batch(lengths, m)
    token_cross_entropy(F, mask, lens, alpha).backward()
    names = [str(i) for i in range(m)]
    loss_fn = SequenceCategoricalCrossentropy(names=names, normalize=False, label_smoothing=alpha)
    expected = torch.zeros_like(F)
    for s, n in enumerate(lengths):
        guesses = torch.softmax(F[s, :n, 0, 0].detach(), -1).numpy()
        d_guesses = loss_fn.get_grad([guesses], [[names[int(c)] for c in gold[s, :n]]])[0]
        expected[s, :n, 0, 0] = torch.from_numpy(numpy.asarray(d_guesses, dtype="float64"))
    torch.testing.assert_close(F.grad, expected, atol=1e-6, rtol=0)  # thinc computes in float32


def test_gradients_against_finite_differences():
    F, lens, _, mask = _batch([3, 2], 4, contexts=(1, 5))
    mask[0, 1] = True  # an unknown gold label
    assert torch.autograd.gradcheck(lambda F: token_cross_entropy(F, mask, lens, 0.1), (F,))


def test_unknown_and_padded_tokens_add_nothing():
    F, lens, _, mask = _batch([3, 2], 4)
    mask[0, 1] = True  # unknown: every label allowed
    token_cross_entropy(F, mask, lens, 0.05).backward()
    assert torch.count_nonzero(F.grad[0, 1]) == 0
    assert torch.count_nonzero(F.grad[1, 2]) == 0  # beyond the second segment's length
    assert torch.count_nonzero(F.grad[0, 0]) > 0
    nothing = torch.ones_like(mask)
    assert float(token_cross_entropy(F, nothing, lens).detach()) == 0.0


def _examples(nlp):
    data = [("I like green eggs", ["P", "V", "A", "N"]), ("you eat ham", ["P", "V", "N"]),
            ("they like red ham", ["P", "V", "A", "N"])]
    return [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in data]


@pytest.mark.parametrize("factory", ["crf_tagger", "nldm_tagger"])
def test_component_adds_the_weighted_token_loss(factory):
    """The component's loss with token_loss = w is its loss with 0 plus w times the per-token loss (both
    per token, normalize_loss); trained with it, the component fits its training data."""
    losses = {}
    for weight in (0.0, 0.7):
        fix_random_seed(0)  # the same tok2vec weights for both
        nlp = spacy.blank("en")
        tagger = nlp.add_pipe(factory, config={"token_loss": weight})
        examples = _examples(nlp)
        nlp.initialize(lambda: examples)
        with torch.no_grad():  # non-zero emissions and interactions, the same for both weights
            for param in tagger.model.get_ref("head").shims[0]._model.parameters():
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())))
        docs = [eg.predicted for eg in examples]
        scores = tagger.model.predict(docs)
        losses[weight] = tagger.get_loss(examples, scores)[0]
        if weight:
            segmented = tagger.segment_scores(docs, scores)
            F = torch.from_numpy(numpy.asarray(segmented.scores))
            gold = torch.from_numpy(tagger._gold_mask(examples, segmented))
            extra = token_cross_entropy(F, gold, torch.from_numpy(segmented.lengths), tagger.label_smoothing)
            n_tokens = float(segmented.lengths.sum())
            assert losses[weight] == pytest.approx(losses[0.0] + weight * float(extra) / n_tokens, rel=1e-5)
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe(factory, config={"token_loss": 0.7})
    examples = _examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    predicted = [[t.tag_ for t in doc] for doc in nlp.pipe(eg.reference.text for eg in examples)]
    assert predicted == [[t.tag_ for t in eg.reference] for eg in examples]


def test_negative_weight_is_refused():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="token_loss must be >= 0"):
        nlp.add_pipe("crf_tagger", config={"token_loss": -0.1})
