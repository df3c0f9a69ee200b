"""projects/paper/scripts/latent_uas.py: the NLDM's latent trees scored against Tweebank v1's gold trees (UAS),
beside the previous- and next-token chains. Heads are 1-based, 0 = root, negative = left out of the gold tree."""
import json

import pytest

from nldm_fixtures import ROOT  # noqa: F401  (puts the repository root on sys.path)
from projects.paper.scripts.latent_uas import (attachment, chain_heads, collapse_left_out, heads_from_nldm, main,
                                               shape, tree_chain_heads, uas)

# "OMG I love it #tag !": OMG and love are roots, I and it hang on love, #tag and ! are left out (-3)
GOLD = [0, 3, 0, 3, -3, -3]


def test_uas_of_a_hand_made_tree():
    pred = [0, 3, 2, 3, 4, 1]  # OMG right, I right, love wrong (on I), it right; #tag and ! not scored
    assert attachment(pred, GOLD) == (3, 4)
    assert uas([(pred, GOLD), ([1, 0], [0, 1])]) == (50.0, 3, 6)  # the second tweet: both heads wrong


def test_previous_token_chain_on_a_chain_gold_tree_is_perfect_and_next_token_is_not():
    gold = [0, 1, 2, 3, 4]
    assert chain_heads(5, "previous") == gold
    assert uas([(chain_heads(5, "previous"), gold)])[0] == 100.0
    assert chain_heads(5, "next") == [2, 3, 4, 5, 0]
    assert uas([(chain_heads(5, "next"), gold)])[0] == 0.0
    with pytest.raises(ValueError):
        chain_heads(3, "sideways")


def test_left_out_tokens_are_not_scored_whatever_is_predicted_for_them():
    right = [0, 3, 0, 3, 1, 1]
    for junk in ([0, 0], [2, 6], [5, 4]):
        assert attachment(right[:4] + junk, GOLD) == (4, 4)
    assert attachment([0] * 3, [-3, -1, -3]) == (0, 0)
    assert uas([([0, 0, 0], [-3, -3, -3])])[2] == 0
    with pytest.raises(ValueError):
        attachment([0, 1], GOLD)


def test_the_chain_over_the_gold_trees_tokens_skips_the_left_out_ones():
    gold = [-3, 0, 2, -3, 3]  # a chain over tokens 2, 3, 5
    assert tree_chain_heads(gold, "previous") == [-1, 0, 2, -1, 3]
    assert uas([(tree_chain_heads(gold, "previous"), gold)])[0] == 100.0
    assert chain_heads(5, "previous") == [0, 1, 2, 3, 4] and attachment(chain_heads(5), gold) == (1, 3)
    assert tree_chain_heads(gold, "next") == [-1, 3, 5, -1, 0]


def test_arcs_through_left_out_tokens_are_followed_into_the_tree():
    gold = [0, -3, -3, 1]
    pred = [0, 1, 2, 3]  # token 4 -> 3 (left out) -> 2 (left out) -> 1
    assert attachment(pred, gold) == (1, 2)
    assert collapse_left_out(pred, gold) == [0, 1, 1, 1]  # the left-out tokens too (not scored)
    assert attachment(collapse_left_out(pred, gold), gold) == (2, 2)
    assert collapse_left_out([3, 0, 2, 3], gold)[3] == 0  # 4 -> 3 -> 2 -> root
    with pytest.raises(ValueError, match="cycle"):
        collapse_left_out([0, 3, 2, 3], gold)


def test_nldm_heads_become_one_based_with_zero_for_the_root():
    assert heads_from_nldm([None, 0, 1, None]) == [0, 1, 2, 0]


def test_tree_shape_counts_lengths_directions_and_roots():
    s = shape([([0, 1, 1, 6, 4, 0], [True, True, True, True, True, False])], max_dist=2)
    # arcs: 2->1 (1, left), 3->1 (2, left), 4->6 (2, right), 5->4 (1, left); one root; token 6 masked
    assert s["tokens"] == 5 and s["root %"] == 20.0
    assert s["arcs of length 1 %"] == 50.0 and s["arcs with the head first %"] == 75.0
    assert s["mean arc length"] == 1.5 and s["arcs of length <= 2 %"] == 100.0


def test_clear_errors_for_a_missing_file_and_a_pipeline_without_nldm_tagger(tmp_path, capsys):
    import spacy

    test = tmp_path / "test"
    test.write_text("1\tlove\t_\tV\tV\t_\t0\t_\t_\t_\t0\t0\t0\t1\n", encoding="utf8")
    with pytest.raises(SystemExit) as exit_:
        main(["--model", str(tmp_path / "no-model"), "--test", str(test)])
    assert exit_.value.code == 2 and str(tmp_path / "no-model") in capsys.readouterr().err  # names what is missing
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path), "--test", str(tmp_path / "no-test")])
    assert str(tmp_path / "no-test") in capsys.readouterr().err
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "plain")
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path / "plain"), "--test", str(test)])
    assert "nldm_tagger" in capsys.readouterr().err  # the component it needs


def test_an_untrained_nldm_pipeline_is_scored_end_to_end(tmp_path):
    """Initialized, not trained: its trees are trees over every token, the chains score as computed by hand."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    nlp = spacy.blank("en")
    nlp.add_pipe("nldm_tagger")
    words, tags = ["OMG", "I", "love", "it", "#tag", "!"], ["!", "O", "V", "O", "#", ","]
    nlp.initialize(lambda: [Example.from_dict(Doc(nlp.vocab, words=words), {"tags": tags})])
    nlp.to_disk(tmp_path / "model")
    rows = ["\t".join([str(i + 1), w, "_", t, t, "_", str(h), "_", "_", "_", "0", "0", "0", str(int(h >= 0))])
            for i, (w, t, h) in enumerate(zip(words, tags, GOLD))]
    (tmp_path / "test").write_text("\n".join(rows) + "\n\n" + "\n".join(rows[:4]) + "\n", encoding="utf8")
    out = tmp_path / "uas.md"
    main(["--model", str(tmp_path / "model"), "--test", str(tmp_path / "test"), "--train-corpus",
          str(tmp_path / "none.spacy"), "--output", str(out), "--json", str(tmp_path / "uas.json")])
    result = json.loads((tmp_path / "uas.json").read_text())
    assert result["tweets"] == {"all": 2} and result["tokens"] == {"all": 10} and result["scored"] == {"all": 8}
    # previous token: OMG (root) right, I (on OMG) wrong, love (on I) wrong, it (on love) right, in both tweets
    assert result["uas"]["head = previous token"]["all"] == 50.0
    assert result["uas"]["head = previous token in the gold tree"]["all"] == 50.0
    # the NLDM's figure, recomputed from the trees the pipeline itself stores on the two tweets
    tagger = spacy.load(tmp_path / "model", config={"components": {"nldm_tagger": {"decode": "posterior",
                                                                                   "store_tree": True}}})
    right = scored = 0
    for doc in tagger.pipe([Doc(tagger.vocab, words=words), Doc(tagger.vocab, words=words[:4])]):
        pred = [0 if t._.nldm_head is None else t._.nldm_head + 1 for t in doc]
        right += sum(p == g for p, g in zip(pred, GOLD) if g >= 0)
        scored += sum(g >= 0 for g in GOLD[:len(doc)])
    assert result["uas"]["NLDM latent tree (posterior)"]["all"] == round(100 * right / scored, 2)
    assert result["shape"]["NLDM (posterior), all tokens"]["tokens"] == 10
    assert "python -m projects.paper.scripts.latent_uas" in out.read_text()
