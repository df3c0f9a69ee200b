"""`convert ner` (spacy_nldm/corpora/conll_ner.py): entity files in CoNLL layouts and schemes go to a DocBin
whose Doc.ents and Doc.spans["sc"] give the same tags back; each kind of malformed input stops with its file and
line; --repair reads broken sequences with a warning per line; the real WNUT 2017 files give their counts; the
root project's `ner` workflow runs on a miniature WNUT mirror."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from spacy.tokens import DocBin
from spacy.training import biluo_to_iob, offsets_to_biluo_tags
from spacy.vocab import Vocab
from typer.testing import CliRunner

from nldm_fixtures import copy_project, run_project_command
from spacy_nldm.cli import app
from spacy_nldm.corpora.conll_ner import NerSentence, entity_offsets
from spacy_nldm.corpora.errors import ConversionError, ConversionWarning

WNUT = Path(__file__).resolve().parent.parent / ".." / "shared" / "data" / "ner" / "wnut17"
TYPES = ("person", "creative-work", "LOC")


def convert(path: Path, *options: str):
    """``convert ner PATH -o PATH.spacy OPTIONS`` in-process: (result, docs or None)."""
    out = path.with_suffix(".spacy")
    res = CliRunner().invoke(app, ["convert", "ner", str(path), "--output", str(out), *options])
    docs = list(DocBin().from_disk(out).get_docs(Vocab())) if res.exit_code == 0 else None
    return res, docs


def random_entities(rng: random.Random, n: int):
    """Non-overlapping (start, end, type) spans over n tokens, adjacent entities (same type or not) included."""
    spans, i = [], 0
    while i < n:
        if rng.random() < 0.4:
            end = min(n, i + rng.randint(1, 3))
            spans.append((i, end, rng.choice(TYPES)))
            i = end
        else:
            i += rng.randint(0, 2) + 1 if rng.random() < 0.5 else 1
    return spans


def tags_in(scheme: str, spans, n: int):
    """The tags of ``spans`` under a scheme; IOBES: BILUO with E and S."""
    tags = ["O"] * n
    previous_end, previous_type = -1, ""
    for start, end, kind in spans:
        if scheme == "BIO":
            tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
        elif scheme == "IOB1":  # B only for an entity right after one of its type
            first = "B" if previous_end == start and previous_type == kind else "I"
            tags[start:end] = [f"{first}-{kind}"] + [f"I-{kind}"] * (end - start - 1)
        else:
            single, last = ("U", "L") if scheme == "BILUO" else ("S", "E")
            tags[start:end] = ([f"{single}-{kind}"] if end - start == 1 else
                               [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 2) + [f"{last}-{kind}"])
        previous_end, previous_type = end, kind
    return tags


def tags_of(doc, scheme: str):
    """The tags of a Doc's entities (from their character offsets) through spaCy's own BILUO and IOB
    functions; IOB1 by hand."""
    biluo = offsets_to_biluo_tags(doc, [(e.start_char, e.end_char, e.label_) for e in doc.ents])
    if scheme == "BIO":
        return biluo_to_iob(biluo)
    if scheme in ("BILUO", "IOBES"):
        table = {"L": "E", "U": "S"} if scheme == "IOBES" else {}
        return [table.get(t[0], t[0]) + t[1:] for t in biluo]
    return tags_in("IOB1", [(e.start, e.end, e.label_) for e in doc.ents], len(doc))


@pytest.mark.parametrize("scheme", ["BIO", "IOB1", "BILUO", "IOBES"])
@pytest.mark.parametrize("layout", ["wnut", "conll2003"])
def test_round_trip_file_docbin_tags(tmp_path, scheme, layout):
    """Random entity sequences, written in a scheme and layout, come back from the DocBin (Doc.ents and the span
    group) as the same spans and the same tags; sentences and tokens as written."""
    rng = random.Random(f"{scheme}{layout}")
    sentences = []
    for k in range(40):
        n = rng.randint(1, 12)
        words = [f"w{k}_{i}" for i in range(n)]
        spans = random_entities(rng, n)
        sentences.append((words, spans, tags_in(scheme, spans, n)))
    lines = ["-DOCSTART- -X- -X- O", ""] if layout == "conll2003" else []
    for k, (words, _, tags) in enumerate(sentences):
        if layout == "wnut":
            lines += [f"{w}\t{t}" for w, t in zip(words, tags)] + ["\t" if k % 2 else ""]
        else:
            lines += [f"{w} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
    path = tmp_path / "in.conll"
    path.write_text("\n".join(lines), encoding="utf8")
    res, docs = convert(path, "--scheme", "BILUO" if scheme == "IOBES" else scheme)
    assert res.exit_code == 0, res.output
    assert len(docs) == len(sentences)
    for doc, (words, spans, tags) in zip(docs, sentences):
        assert [t.text for t in doc] == words
        assert [(e.start, e.end, e.label_) for e in doc.ents] == spans
        assert [(s.start, s.end, s.label_) for s in doc.spans["sc"]] == spans
        assert tags_of(doc, scheme) == tags
        assert all(t.ent_iob_ in "BIO" and t.ent_iob_ != "" for t in doc)  # every token annotated
    assert f"entities: {sum(len(s) for _, s, _ in sentences)}" in res.output


@pytest.mark.parametrize("text, scheme, line, problem", [
    ("a\tO\nb\tB-x\n\nc\tX-x\n", "BIO", 4, "bad tag 'X-x'"),
    ("a\tO\nb\tperson\n", "BIO", 2, "bad tag 'person'"),
    ("a\tO\nb\tB-\n", "BIO", 2, "bad tag 'B-'"),
    ("a\tS-x\n", "BIO", 1, "use scheme BILUO"),
    ("a\t-x\n", "BIO", 1, "bad tag '-x': expected O or one of B, I + '-TYPE' (scheme BIO)\n"),
    ("a\tO\nb\tL-x\n", "IOB1", 2, "bad tag 'L-x'"),
    ("a\tO\n\nb\tO\nc\tI-x\n", "BIO", 4, "'I-x' after 'O' continues no x entity"),
    ("a\tI-x\n", "BIO", 1, "after the sentence start"),
    ("a\tB-x\nb\tI-y\n", "BIO", 2, "'I-y' after 'B-x'"),
    ("a\tB-x\nb\tO\n", "BILUO", 2, "entity begun on line 1 is not ended by L-x"),
    ("a\tB-x\nb\tI-x\n", "BILUO", 2, "the sentence ends inside the x entity begun on line 1"),
    ("a\tO\nb\tL-x\n", "BILUO", 2, "'L-x' after 'O'"),
    ("a\tO\nb\n", "BIO", 2, "tag column missing"),
    ("a\tO\n\tO\n", "BIO", 2, "empty token"),
    ("a\tO\nb\t \n", "BIO", 2, "empty tag"),
    ("a\tO\n\u00a0\nb\tO\n", "BIO", 2, "tag column missing"),  # a no-break space is a token, not a blank line
])
def test_malformed_input_stops_with_file_and_line(tmp_path, text, scheme, line, problem):
    path = tmp_path / "bad.conll"
    path.write_text(text, encoding="utf8")
    res, _ = convert(path, "--scheme", scheme)
    assert res.exit_code == 1
    assert res.stderr.startswith(f"error: {path}:{line}: ") and problem in res.stderr, res.stderr
    assert "Traceback" not in res.output and not path.with_suffix(".spacy").exists()


def test_iob1_reads_what_bio_calls_broken():
    sent = NerSentence(["a", "b", "c", "d", "e"], ["I-x", "I-x", "B-x", "I-y", "O"], [1, 2, 3, 4, 5], "f")
    assert entity_offsets(sent, "IOB1") == [(0, 2, "x"), (2, 3, "x"), (3, 4, "y")]
    with pytest.raises(ConversionError, match="^f:1: broken entity"):
        entity_offsets(sent, "BIO")


def test_repair_reads_broken_sequences_with_a_warning_per_line(tmp_path):
    bio = NerSentence(["a", "b", "c", "d"], ["O", "I-x", "I-y", "I-y"], [3, 4, 5, 6], "f")
    with pytest.warns(ConversionWarning) as caught:
        assert entity_offsets(bio, "BIO", repair=True) == entity_offsets(bio, "IOB1") == [(1, 2, "x"), (2, 4, "y")]
    assert [(w.message.line, "read as B-" in w.message.problem) for w in caught] == [(4, True), (5, True)]
    biluo = NerSentence(list("abcdef"), ["L-x", "B-y", "O", "B-x", "U-y", "I-x"], [1, 2, 3, 4, 5, 6], "f")
    with pytest.warns(ConversionWarning) as caught:
        spans = entity_offsets(biluo, "BILUO", repair=True)
    assert spans == [(0, 1, "x"), (1, 2, "y"), (3, 4, "x"), (4, 5, "y"), (5, 6, "x")]
    assert [w.message.line for w in caught] == [1, 3, 5, 6, 6]  # stray L, B-y unended, B-x unended, stray I, end
    path = tmp_path / "broken.conll"
    path.write_text("a\tO\nb\tI-x\n\nc\tI-y\n", encoding="utf8")
    res, docs = convert(path, "--repair")
    assert res.exit_code == 0, res.output
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in docs] == [[(1, 2, "x")], [(0, 1, "y")]]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, res.stderr  # one a repaired line: its file and line, the tag and how it was read
    for line, (number, tag) in zip(warnings, ((2, "x"), (4, "y"))):
        assert line.startswith(f"warning: {path}:{number}: ") and f"'I-{tag}'" in line and f"B-{tag}" in line, line


def test_named_columns_and_comments(tmp_path):
    """Universal NER's layout: comments before each sentence, id, token, tag and more columns; a '#' token
    after a sentence's first token is a token."""
    path = tmp_path / "uner.iob2"
    path.write_text("# sent_id = a-1\n# text = Al went #home\n1\tAl\tB-PER\t-\t-\n2\twent\tO\t-\t-\n"
                    "3\t#home\tB-LOC\t-\t-\n\n# sent_id = a-2\n1\tParis\tB-LOC\t-\t-\n", encoding="utf8")
    res, docs = convert(path, "--token-column", "2", "--tag-column", "3", "--comments")
    assert res.exit_code == 0, res.output
    assert [[t.text for t in d] for d in docs] == [["Al", "went", "#home"], ["Paris"]]
    assert [[(e.text, e.label_) for e in d.ents] for d in docs] == [[("Al", "PER"), ("#home", "LOC")],
                                                                     [("Paris", "LOC")]]
    assert [d.user_data["source"] for d in docs] == ["uner.iob2:3", "uner.iob2:8"]
    res, _ = convert(path, "--token-column", "2", "--tag-column", "3")  # the comment is read as a token line
    assert res.exit_code == 1 and res.stderr.startswith(f"error: {path}:1: bad tag '='"), res.stderr
    two = tmp_path / "two.conll"
    two.write_text("a\tO\n", encoding="utf8")
    res, _ = convert(two, "--tag-column", "3")
    assert res.exit_code == 1 and res.stderr.startswith(f"error: {two}:1: tag column missing")
    res, _ = convert(two, "--tag-column", "0")
    assert res.exit_code == 1 and "count from 1" in res.stderr


def test_token_with_a_space_is_kept_with_a_warning(tmp_path):
    path = tmp_path / "in.conll"
    path.write_text("New York\tB-LOC\nis\tO\n", encoding="utf8")
    res, docs = convert(path)
    assert res.exit_code == 0 and [t.text for t in docs[0]] == ["New York", "is"]
    assert res.stderr.startswith(f"warning: {path}:1: token 'New York' contains an ASCII space")


def test_unknown_scheme_fails_clearly(tmp_path):
    path = tmp_path / "in.conll"
    path.write_text("a\tO\n", encoding="utf8")
    res, _ = convert(path, "--scheme", "IOB2")
    assert res.exit_code == 1 and "--scheme must be one of BIO, IOB1, BILUO" in res.stderr


@pytest.mark.skipif(not WNUT.is_dir(), reason="the WNUT 2017 files are not in ../shared/data")
@pytest.mark.parametrize("name, sentences, tokens, entities", [
    ("wnut17train.conll", 3394, 62730, 1975),
    ("emerging.dev.conll", 1009, 15733, 836),
    ("emerging.test.annotated", 1287, 23394, 1079),
])
def test_wnut17_counts(name, sentences, tokens, entities):
    """The counts of the dataset's README; the train file separates its sentences by a line holding one TAB.
    (Read in memory: writing the DocBin, which the command tests above cover, is most of the command's time.)"""
    from spacy_nldm.corpora.conll_ner import conll_ner_to_docs

    docs, _ = conll_ner_to_docs([WNUT / name])
    assert (len(docs), sum(len(d) for d in docs), sum(len(d.ents) for d in docs)) == (sentences, tokens, entities)
    assert {e.label_ for d in docs for e in d.ents} == {"person", "location", "group", "creative-work",
                                                        "corporation", "product"}


def write_mini_wnut(mirror: Path) -> dict:
    """WNUT-shaped files (train: sentences separated by a line holding one TAB) of 12, 6 and 6 sentences with
    entities of every type in each; returns {file name: (sentences, entities)}."""
    folder = mirror / "ner" / "wnut17"
    folder.mkdir(parents=True)
    types = ["person", "location", "group", "creative-work", "corporation", "product"]
    counts = {}
    for name, n, separator in (("wnut17train.conll", 12, "\t"), ("emerging.dev.conll", 6, ""),
                               ("emerging.test.annotated", 6, "")):
        lines = []
        for k in range(n):
            kind = types[k % len(types)]
            lines += ["@user\tO", f"Big\tB-{kind}", f"Name{k}\tI-{kind}", "is\tO", "here\tO", separator]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf8")
        counts[name] = (n, n)
    return counts


def test_project_ner_workflow_trains_and_tests_both_systems(tmp_path):
    """The whole `ner` workflow, two steps per system: ner-corpora keeps every sentence and entity of the three
    WNUT files, the configs come from `spacy init config -p SYSTEM`, the test scores (spaCy's ents_p/r/f and
    per type) and the displaCy pages are written."""
    import srsly

    proj = copy_project(tmp_path / "proj")
    counts = write_mini_wnut(tmp_path / "mirror")
    run_project_command(proj, "ner", f"--vars.mirror={tmp_path / 'mirror'}", "--vars.ner_steps=2")  # model-best: the evaluation at step 0
    for name, split in (("wnut17train.conll", "train"), ("emerging.dev.conll", "dev"),
                        ("emerging.test.annotated", "test")):
        docs = list(DocBin().from_disk(proj / "corpus" / "wnut17" / f"{split}.spacy").get_docs(Vocab()))
        assert (len(docs), sum(len(d.ents) for d in docs)) == counts[name]
    for system in ("crf_ner", "nldm_ner"):
        scores = srsly.read_json(proj / "metrics" / "wnut17" / f"{system}.json")
        assert {"ents_p", "ents_r", "ents_f", "ents_per_type"} <= set(scores), system
        assert "<html" in (proj / "metrics" / "wnut17" / f"{system}.html").read_text(encoding="utf8")
