"""Converters on small fixtures: what they keep, and how they fail on each kind of malformed input."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_nldm.corpora.ark import ARK_TAGS, ark_to_docs, read_ark
from spacy_nldm.corpora.conllu import check_conllu, gold_heads, set_targets
from spacy_nldm.corpora.errors import ConversionError
from spacy_nldm.corpora.tweebank import read_tweebank_v1, tweebank_v1_to_docs

FIX = Path(__file__).parent / "fixtures"
ARK = FIX / "ark_good.txt"
CONLLU = FIX / "conllu_good.conllu"
TB1 = FIX / "tweebank_v1_good.txt"


def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf8"))
    return path


class _Result:
    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.exit_code, res.stdout, res.stderr


def _cli(*args):
    """``python -m spacy_nldm convert ARGS``, in-process (the same Typer app)."""
    from typer.testing import CliRunner

    from spacy_nldm.cli import app

    return _Result(CliRunner().invoke(app, ["convert", *map(str, args)]))


def counts(path: Path):
    """(sentences, tokens) of a DocBin on disk."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    docs = list(DocBin().from_disk(path).get_docs(Vocab()))
    return len(docs), sum(len(doc) for doc in docs)


def numbers(text: str) -> set:
    """The integers a command printed (its counts), whatever the words around them."""
    return set(re.findall(r"\d+", text))



def test_cli_module_runs_as_a_process(tmp_path):
    res = subprocess.run([sys.executable, "-m", "spacy_nldm", "convert", "ark", str(tmp_path / "none.txt"),
                          "--output", str(tmp_path / "x.spacy")], capture_output=True, text=True)
    assert res.returncode == 1 and res.stderr.startswith(f"error: {tmp_path / 'none.txt'}") and "Traceback" not in res.stderr


# ------------------------------------------------------------------------------------------------- ARK
def test_ark_reads_tweets_tags_and_nbsp_tokens():
    sents = list(read_ark(ARK, tagset=ARK_TAGS))
    assert [len(s.words) for s in sents] == [6, 3, 1]
    assert sents[0].words[2] == "\xa0"  # a token that is only a no-break space stays a token
    assert sents[1].words[1] == "\xa0Senior"
    assert sents[1].tags[0] == "!" and sents[0].words[5] == "!"
    assert [s.line for s in sents] == [1, 8, 12]


def test_ark_docs_keep_every_token_and_tag(tmp_path):
    docs, per_file = ark_to_docs([ARK, ARK])  # files are concatenated in order
    assert len(docs) == 6 and per_file == [(str(ARK), 3, 10), (str(ARK), 3, 10)]
    first = docs[0]
    assert [t.text for t in first] == ["I", "predict", "\xa0", "won't", "win", "!"]
    assert [t.tag_ for t in first] == ["O", "V", "G", "V", "V", ","]
    # through a DocBin and back: nothing lost
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    DocBin(docs=docs, store_user_data=True).to_disk(tmp_path / "x.spacy")
    back = list(DocBin().from_disk(tmp_path / "x.spacy").get_docs(Vocab()))
    assert [[(t.text, t.tag_) for t in d] for d in back] == [[(t.text, t.tag_) for t in d] for d in docs]


@pytest.mark.parametrize(
    "name,data,line,problem",
    [
        ("three_cols.txt", "a\tN\nb\tV\tX\n", 2, "wrong column count"),
        ("no_tab.txt", "a\tN\nb\n\nc\tN\n", 2, "tag column missing"),
        ("empty_tag.txt", "a\tN\nb\t\n", 2, "tag column missing"),
        ("empty_token.txt", "a\tN\n\tV\n", 2, "empty token"),
        ("bad_tag.txt", "a\tN\nb\tNN\n", 2, "unknown tag 'NN'"),
        ("empty.txt", "", None, "empty file"),
        ("blank_only.txt", "\n \n\t\n", None, "empty file"),
        ("bad_utf8.txt", b"a\tN\n\nb\xff\xfeq\tV\n", 3, "invalid UTF-8"),
    ],
)
def test_ark_malformed_input_names_file_line_and_problem(tmp_path, name, data, line, problem):
    path = _write(tmp_path, name, data)
    with pytest.raises(ConversionError) as info:
        list(read_ark(path, tagset=ARK_TAGS))
    err = info.value
    assert err.path == str(path) and err.line == line and problem in err.problem
    assert str(err).startswith(f"{path}:{line}:" if line else f"{path}:")


def test_ark_cli_counts_and_clean_error(tmp_path):
    out = tmp_path / "train.spacy"
    ok = _cli("ark", ARK, "--output", out)
    assert ok.returncode == 0, ok.stderr
    assert counts(out) == (3, 10) and {"3", "10"} <= numbers(ok.stdout)
    bad = _write(tmp_path, "bad.txt", "a\tN\nb\tV\tX\n")
    res = _cli("ark", bad, "--output", tmp_path / "bad.spacy")
    assert res.returncode == 1
    assert res.stderr.startswith(f"error: {bad}:2:")
    assert "Traceback" not in res.stderr and not (tmp_path / "bad.spacy").exists()


# ------------------------------------------------------------------------------------------------- CoNLL-U
def test_conllu_check_counts_syntactic_words():
    st = check_conllu(CONLLU)
    assert (st.sentences, st.words, st.multiword_tokens) == (2, 9, 1)
    assert st.sentence_lengths == [7, 2] and st.upos["DET"] == 2


@pytest.mark.parametrize(
    "mutate,line,problem",
    [
        (lambda t: t.replace("2\tgatto\tgatto\tNOUN\tS\t_\t5\tnsubj\t_\t_", "2\tgatto\tgatto\tNOUN\tS\t_\t5\tnsubj\t_"), 4, "wrong column count"),
        (lambda t: t.replace("gatto\tNOUN", "gatto\t_"), 4, "tag column missing"),
        (lambda t: t.replace("gatto\tNOUN", "gatto\tNOUNX"), 4, "unknown UPOS"),
        (lambda t: t.replace("gatto\tNOUN\tS\t_", "gatto\tNOUN\tS\tFoo"), 4, "bad FEATS 'Foo'"),
        (lambda t: t.replace("gatto\tNOUN\tS\t_", "gatto\tNOUN\tS\tGender=Masc|Number"), 4, "bad FEATS"),
        (lambda t: t.replace("5\tvicino", "6\tvicino"), 8, "bad word id"),
        (lambda t: t.replace("VERB\tV\t_\t0", "VERB\tV\t_\tzero"), 9, "HEAD 'zero' is not a number"),
        (lambda t: t.replace("VERB\tV\t_\t0", "VERB\tV\t_\t9"), 9, "points past the sentence end"),
        (lambda t: "", None, "empty file"),
        (lambda t: t.replace("\tdorme\tdormire", "\tdor\udcffme\tdormire"), 9, "invalid UTF-8"),
    ],
)
def test_conllu_malformed_input_names_file_line_and_problem(tmp_path, mutate, line, problem):
    text = mutate(CONLLU.read_text(encoding="utf8"))
    path = _write(tmp_path, "bad.conllu", text.encode("utf8", "surrogateescape"))
    with pytest.raises(ConversionError) as info:
        check_conllu(path)
    assert info.value.path == str(path) and info.value.line == line and problem in info.value.problem


def _spacy_convert(src: Path, out_dir: Path) -> Path:
    """``spacy convert SRC OUT --converter conllu --n-sents 1``, in-process (spaCy's own CLI app)."""
    from spacy.cli._util import app as spacy_app
    from typer.testing import CliRunner

    res = CliRunner().invoke(spacy_app, ["convert", str(src), str(out_dir), "--converter", "conllu",
                                         "--n-sents", "1", "--file-type", "spacy"])
    assert res.exit_code == 0, res.output
    return out_dir / (src.stem + ".spacy")


def test_spacy_convert_then_targets_copies_upos_and_keeps_trees(tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    raw = _spacy_convert(CONLLU, tmp_path)
    docs = list(DocBin().from_disk(raw).get_docs(Vocab()))
    docs, n_sents, n_toks = set_targets(docs, raw, check_conllu(CONLLU))
    assert (n_sents, n_toks) == (2, 9)
    first = docs[0]
    # multiword token "del" split into its syntactic words di + il
    assert [t.text for t in first] == ["Il", "gatto", "di", "il", "vicino", "dorme", "."]
    assert [t.tag_ for t in first] == [t.pos_ for t in first] == ["DET", "NOUN", "ADP", "DET", "NOUN", "VERB", "PUNCT"]
    assert first.user_data["gold_heads"] == gold_heads(first) == [2, 5, 5, 5, 6, 0, 6]


def test_targets_refuse_a_docbin_that_lost_sentences(tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    raw = _spacy_convert(CONLLU, tmp_path)
    docs = list(DocBin().from_disk(raw).get_docs(Vocab()))
    with pytest.raises(ConversionError, match="1 Docs but .* 2 sentences"):
        set_targets(docs[:1], raw, check_conllu(CONLLU))
    out = tmp_path / "x.spacy"
    res = _cli("ud-targets", raw, "--output", out, "--expect-sentences", "3")
    assert res.returncode == 1 and {"2", "3"} <= numbers(res.stderr) and not out.exists() and "Traceback" not in res.stderr


def test_conllu_check_cli(tmp_path):
    res = _cli("conllu-check", CONLLU)
    assert res.returncode == 0 and {"2", "9", "1"} <= numbers(res.stdout)
    res = _cli("conllu-check", _write(tmp_path, "e.conllu", ""))
    assert res.returncode == 1 and res.stderr.startswith("error: ") and "Traceback" not in res.stderr


# ------------------------------------------------------------------------------------------------- Tweebank v1
def test_tweebank_v1_keeps_gold_heads_and_left_out_tokens():
    tweets = list(read_tweebank_v1(TB1))
    assert [t.heads for t in tweets] == [[-3, -3, 0, 3, -3], [0, 3, 0]]
    docs, per_file = tweebank_v1_to_docs([TB1])
    assert per_file == [(str(TB1), 2, 8)]
    d = docs[0]
    assert [t.tag_ for t in d] == ["~", "@", "V", "O", "#"]
    assert d.user_data["gold_heads"] == [-3, -3, 0, 3, -3]
    assert [t.head.i for t in d] == [0, 1, 2, 2, 4]
    assert [t.dep_ for t in d] == ["excluded", "excluded", "ROOT", "dep", "excluded"]
    assert [t.dep_ for t in docs[1]] == ["ROOT", "MWE", "ROOT"] and docs[1].user_data["gold_heads"] == [0, 3, 0]


@pytest.mark.parametrize(
    "mutate,line,problem",
    [
        (lambda t: t.replace("\t1\t1\t1\t1\n", "\t1\t1\t1\n", 1), 3, "wrong column count"),
        (lambda t: t.replace("got\t_\tV", "got\t_\t_"), 3, "tag column missing"),
        (lambda t: t.replace("them\t_\tO\tO\t_\t3", "them\t_\tO\tO\t_\t1"), 4, "left out of the tree"),
        (lambda t: t.replace("them\t_\tO\tO\t_\t3", "them\t_\tO\tO\t_\tx"), 4, "not a number"),
        (lambda t: "\n\n", None, "empty file"),
    ],
)
def test_tweebank_v1_malformed(tmp_path, mutate, line, problem):
    path = _write(tmp_path, "tb.txt", mutate(TB1.read_text(encoding="utf8")))
    with pytest.raises(ConversionError) as info:
        list(read_tweebank_v1(path))
    assert info.value.line == line and problem in info.value.problem


# ------------------------------------------------------------------------------------------------- issue 13, item 6
def test_conllu_with_a_byte_order_mark_is_reported_by_the_check_and_removed_by_convert_ud(tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    bom = _write(tmp_path, "bom.conllu", b"\xef\xbb\xbf" + CONLLU.read_bytes())
    res = _cli("conllu-check", bom)
    assert res.returncode == 1 and res.stderr.startswith(f"error: {bom}:1:")
    assert "Traceback" not in res.stderr
    res = _cli("ud", bom, "--output", tmp_path / "bom.spacy")
    assert res.returncode == 0, res.stderr
    assert res.stderr.startswith(f"warning: {bom}:1:") and counts(tmp_path / "bom.spacy") == (2, 9)
    res = _cli("ud", CONLLU, "--output", tmp_path / "plain.spacy")
    assert res.returncode == 0 and res.stderr == ""

    def read(name):
        return [[(t.text, t.tag_, t.pos_, t.head.i, t.dep_) for t in d] + [d.user_data["gold_heads"]]
                for d in DocBin().from_disk(tmp_path / name).get_docs(Vocab())]

    assert read("bom.spacy") == read("plain.spacy")


def test_convert_ud_is_spacy_convert_then_targets(tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    raw = _spacy_convert(CONLLU, tmp_path)
    assert _cli("ud-targets", raw, "--output", tmp_path / "two_steps.spacy", "--conllu", CONLLU).returncode == 0
    assert _cli("ud", CONLLU, "--output", tmp_path / "one_step.spacy").returncode == 0

    def read(name):
        return [([(t.text, t.whitespace_, t.tag_, t.pos_, t.head.i, t.dep_, str(t.morph)) for t in d], d.user_data)
                for d in DocBin().from_disk(tmp_path / name).get_docs(Vocab())]

    assert read("one_step.spacy") == read("two_steps.spacy")


@pytest.mark.parametrize("content", [b"", ARK.read_bytes(), b"\x00\x01 not a docbin"], ids=["empty", "text", "bytes"])
def test_ud_targets_on_a_file_that_is_not_a_docbin_is_a_clean_error(tmp_path, content):
    path = _write(tmp_path, "x.spacy", content)
    res = _cli("ud-targets", path, "--output", tmp_path / "out.spacy")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"error: {path}: ") and "DocBin" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.spacy").exists()


@pytest.mark.parametrize("command,source", [("ark", ARK), ("conllu-check", CONLLU), ("tweebank-v1", TB1)])
def test_cr_only_line_endings_are_named(tmp_path, command, source):
    path = _write(tmp_path, "mac.txt", source.read_bytes().replace(b"\n", b"\r"))
    args = [path] if command == "conllu-check" else [path, "--output", tmp_path / "x.spacy"]
    res = _cli(command, *args)
    assert res.returncode == 1 and res.stderr.startswith(f"error: {path}:1:")
    crlf = _write(tmp_path, "dos.txt", source.read_bytes().replace(b"\n", b"\r\n"))  # CRLF stays fine
    args = [crlf] if command == "conllu-check" else [crlf, "--output", tmp_path / "y.spacy"]
    assert _cli(command, *args).returncode == 0


def test_ark_token_with_an_ascii_space_is_kept_with_a_warning(tmp_path):
    from spacy_nldm.corpora.errors import ConversionWarning

    path = _write(tmp_path, "space.txt", "a\tN\nNew York\t^\n")
    with pytest.warns(ConversionWarning, match=r"space.txt:2: token 'New York' contains an ASCII space"):
        (sent,) = read_ark(path, tagset=ARK_TAGS)
    assert sent.words == ["a", "New York"]
    res = _cli("ark", path, "--output", tmp_path / "x.spacy")
    assert res.returncode == 0 and res.stderr.startswith(f"warning: {path}:2:")
    assert counts(tmp_path / "x.spacy") == (1, 2)


# ------------------------------------------------------------------------------------------------- split
@pytest.mark.parametrize("n, share", [(2, 0.5), (3, 0.5), (10, 0.15), (671, 0.15), (7, 0.01), (100, 0.45)])
def test_split_dev_partitions_in_order_and_spreads_dev(n, share):
    from spacy_nldm.corpora.docbins import split_dev

    train, dev = split_dev(list(range(n)), share)
    assert sorted(train + dev) == list(range(n)) and train == sorted(train) and dev == sorted(dev)
    assert len(dev) == max(1, int(n * share)) and train
    # one dev document in each of len(dev) equal stretches: spread through the file, not a block at the end
    stretch = n / len(dev)
    assert all(k * stretch <= i < (k + 1) * stretch for k, i in enumerate(dev)) and dev[-1] == n - 1
    assert split_dev(list(range(n)), share) == (train, dev)


@pytest.mark.parametrize("n, share", [(5, 0.0), (5, 0.6), (5, 1.0), (5, -0.1), (1, 0.5), (0, 0.2)])
def test_split_dev_refuses_what_cannot_give_both_parts(n, share):
    from spacy_nldm.corpora.docbins import split_dev

    with pytest.raises(ValueError):
        split_dev(list(range(n)), share)


def test_split_cli_round_trip_keeps_every_sentence_and_tag(tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    whole = tmp_path / "whole.spacy"
    assert _cli("ark", ARK, "--output", whole).returncode == 0
    train, dev = tmp_path / "train.spacy", tmp_path / "dev.spacy"
    res = _cli("split", whole, "--train", train, "--dev", dev, "--dev-share", "0.34")
    assert res.returncode == 0, res.stderr
    assert (counts(train)[0], counts(dev)[0]) == (2, 1)

    def read(path):
        return [[(t.text, t.tag_) for t in doc] for doc in DocBin().from_disk(path).get_docs(Vocab())]

    both = read(train) + read(dev)
    assert sorted(both) == sorted(read(whole)) and len(read(dev)) == 1


def test_split_cli_errors_name_the_file_and_problem(tmp_path):
    whole = tmp_path / "whole.spacy"
    assert _cli("ark", ARK, "--output", whole).returncode == 0
    out = ["--train", tmp_path / "a.spacy", "--dev", tmp_path / "b.spacy"]
    res = _cli("split", tmp_path / "none.spacy", *out)
    assert res.returncode == 1 and res.stderr.startswith(f"error: {tmp_path / 'none.spacy'}")
    res = _cli("split", whole, *out, "--dev-share", "1.5")
    assert res.returncode == 1 and res.stderr.startswith(f"error: {whole}")
    res = _cli("split", whole, "--train", whole, "--dev", tmp_path / "b.spacy")
    assert res.returncode == 1 and res.stderr.startswith("error: ")
    assert "Traceback" not in res.stderr and not (tmp_path / "a.spacy").exists()
