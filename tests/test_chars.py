"""The character CNN word representation (``spacy-nldm.HashCharEmbed.v1``): its ids, its vectors against a
direct numpy computation, its gradients against torch's, its batch independence, and a tagger that uses it
learning and coming back from disk."""
import random

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry
from thinc.api import Adam, fix_random_seed

from spacy_nldm.models.chars import END, PAD, START, char_cnn, char_ids


def test_char_ids_mark_the_word_hash_its_characters_and_clip_long_words():
    ids = char_ids(["ab", "abcdefghij"], rows=50, max_chars=6)
    code = lambda c: 3 + ord(c) % 47  # noqa: E731
    assert ids.shape == (2, 8)
    assert list(ids[0]) == [START, code("a"), code("b"), END, PAD, PAD, PAD, PAD]
    assert list(ids[1]) == [START] + [code(c) for c in "abchij"] + [END]  # first and last 3 characters
    assert char_ids([], rows=50, max_chars=6).shape == (0, 2)


def numpy_char_cnn(module, ids):
    """The same vectors computed in numpy from the module's weights: embed, convolve (zero padded), max over the word."""
    E = module.embed.weight.detach().numpy()
    W, b = module.conv.weight.detach().numpy(), module.conv.bias.detach().numpy()  # (nO, dim, window), (nO,)
    half = W.shape[2] // 2
    out = []
    for row in ids:
        n = int((row != PAD).sum())
        X = numpy.pad(E[row[:n]], ((half, half), (0, 0)))  # the word's own characters, zero beyond them
        H = [b + numpy.einsum("odw,wd->o", W, X[i : i + W.shape[2]]) for i in range(n)]
        out.append(numpy.max(H, axis=0))
    return numpy.array(out)


def docs_of(words_per_doc):
    vocab = spacy.blank("en").vocab
    return [Doc(vocab, words=words) for words in words_per_doc]


def test_char_cnn_vectors_are_the_max_over_each_words_own_characters_whatever_the_batch():
    torch.manual_seed(0)
    model = char_cnn(7, char_dim=5, window=3, rows=40, max_chars=8)
    model.initialize()
    module = model.layers[0].shims[0]._model
    docs = docs_of([["Hello", "@bob", "a"], [], ["supercalifragilistic", "Hello"]])
    Ys = model.predict(docs)
    assert [y.shape for y in Ys] == [(3, 7), (0, 7), (2, 7)]
    words = [t.text for doc in docs for t in doc]
    numpy.testing.assert_allclose(numpy.concatenate(Ys), numpy_char_cnn(module, char_ids(words, 40, 8)), rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(Ys[0], model.predict(docs[:1])[0], rtol=1e-6)  # no neighbour changes a vector
    numpy.testing.assert_allclose(Ys[0][0], Ys[2][1], rtol=1e-6)  # the same word, the same vector
    assert [y.shape for y in model.predict(docs_of([[], []]))] == [(0, 7), (0, 7)]


def test_char_cnn_passes_the_gradient_to_its_torch_parameters():
    torch.manual_seed(1)
    model = char_cnn(4, char_dim=3, window=3, rows=30)
    model.initialize()
    module = model.layers[0].shims[0]._model
    docs = docs_of([["ab", "abc"], ["zzzz"]])
    rng = numpy.random.default_rng(0)
    Ys, backprop = model.begin_update(docs)
    dYs = [rng.normal(size=y.shape).astype("float32") for y in Ys]
    module.zero_grad()
    backprop(dYs)
    ours = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    ids = torch.from_numpy(char_ids(["ab", "abc", "zzzz"], 30, 20))
    (module(ids) * torch.from_numpy(numpy.concatenate(dYs))).sum().backward()
    for name, p in module.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, msg=name)
        assert p.grad.abs().sum() > 0, name


def test_hash_char_embed_rejects_a_char_width_that_leaves_no_room():
    build = registry.architectures.get("spacy-nldm.HashCharEmbed.v1")
    with pytest.raises(ValueError, match="char_width must be in"):
        build(width=32, attrs=["NORM"], rows=[100], include_static_vectors=False, char_width=32)


def test_a_tagger_on_hash_char_embed_learns_suffix_tags_of_unseen_words_and_comes_back_from_disk(tmp_path):
    """Tags follow the words' endings; the held-out words are unseen, so the hash of NORM cannot help."""
    fix_random_seed(0)
    stems = ["walk", "talk", "jump", "play", "kick", "cook", "pull", "push", "rain", "look", "help", "mark"]
    rng = random.Random(0)

    def sentence(stem_list):
        words = [rng.choice(stem_list) + rng.choice(["ing", "ed", "s"]) for _ in range(5)]
        return words, [{"g": "G", "d": "D", "s": "S"}[w[-1]] for w in words]

    train = [sentence(stems[:8]) for _ in range(60)]
    held_out = [sentence(stems[8:]) for _ in range(20)]
    nlp = spacy.blank("en")
    embed = {"@architectures": "spacy-nldm.HashCharEmbed.v1", "width": 32, "char_width": 16,
             "attrs": ["NORM"], "rows": [500], "include_static_vectors": False}
    tok2vec = {"@architectures": "spacy.Tok2Vec.v2", "embed": embed,
               "encode": {"@architectures": "spacy-nldm.TorchBiLSTMEncoder.v1", "width": 32, "depth": 1, "dropout": 0.0}}
    nlp.add_pipe("nldm_tagger", config={"model": {"tok2vec": tok2vec, "label_dim": 8, "max_dist": 2}})
    examples = lambda sents: [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in sents]  # noqa: E731
    egs = examples(train)
    nlp.initialize(lambda: egs)
    optimizer = Adam(0.01)
    for _ in range(12):
        rng.shuffle(egs)
        for i in range(0, len(egs), 10):
            nlp.update(egs[i : i + 10], sgd=optimizer)
    assert nlp.evaluate(examples(held_out))["tag_acc"] > 0.75  # hashes of NORM alone: about 0.3
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    words = [w for w, _ in held_out]
    assert [[t.tag_ for t in nlp(Doc(nlp.vocab, words=w))] for w in words] == \
        [[t.tag_ for t in loaded(Doc(loaded.vocab, words=w))] for w in words]
