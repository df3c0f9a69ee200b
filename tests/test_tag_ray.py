"""`python -m spacy_nldm tag`: bulk tagging on Ray Data (spacy_nldm/bulk.py), on a local Ray instance of two
CPUs with a tiny NLDM pipeline trained here: JSONL, text and Parquet shards give what ``nlp.pipe`` gives,
every document comes out once, malformed records go to the errors files, finished shards are skipped and a
worker killed mid-run costs nothing."""
import importlib.util
import json
import os
import sys

import numpy
import pytest
import spacy
import srsly
from spacy.tokens import DocBin
from typer.testing import CliRunner

from nldm_fixtures import TWITTER, train_tweet_pipeline
from spacy_nldm.corpora.ark import read_ark

HAS_RAY = importlib.util.find_spec("ray") is not None and importlib.util.find_spec("pyarrow") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason='Ray Data is not installed (pip install "spacy-nldm[ray]")')

TWEETS = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:24]
TEXTS = [" ".join(w) for w, _ in TWEETS] + ["", "OMG I love this song", "ikr smh he asked fir yo last name"]
CRASH_TEXT = TEXTS[7]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return train_tweet_pipeline(tmp_path_factory.mktemp("tag_ray") / "nldm")


@pytest.fixture(scope="module")
def ray_local():
    if not HAS_RAY:
        pytest.skip('Ray Data is not installed (pip install "spacy-nldm[ray]")')
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def expected(pipeline):
    """tokens, tags, heads (-1: root) and label marginals of every text, from nlp.pipe."""
    nlp = spacy.load(pipeline, config={"components": {"nldm": {"store_probs": True}}})
    return {doc.text: ([t.text for t in doc], [t.tag_ for t in doc],
                       [-1 if t._.nldm_head is None else t._.nldm_head for t in doc], doc._.nldm_probs)
            for doc in nlp.pipe(TEXTS)}


def read_parquet(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def check_rows(rows, texts, expected, probs=False):
    assert len(rows) == len(texts)
    for row, text in zip(rows, texts):
        tokens, tags, heads, marginals = expected[text]
        assert (row["tokens"], row["tags"], row["heads"]) == (tokens, tags, heads)
        assert "ents" not in row  # the pipeline sets no entities
        if probs:
            numpy.testing.assert_allclose(numpy.array(row["probs"], dtype="float32").reshape(marginals.shape),
                                          marginals, atol=1e-5)


def assert_mode_follows_umask(path):
    """An output file gets the mode any new file gets under the process's umask (not mkstemp's 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask, oct(path.stat().st_mode)


def write_inputs(folder):
    """a.jsonl: the texts with ids, a bad JSON line (line 5), a record without text (line 9), a blank line;
    sub/b.txt: one text a line; c.parquet: the texts in two row groups, a null text at row 3."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "sub").mkdir(parents=True)
    lines, want_a = [], []
    for i, text in enumerate(TEXTS[:12]):
        if len(lines) == 4:
            lines.append('{"id": "broken", "text": "no closing quote}')
        if len(lines) == 8:
            lines.append(json.dumps({"id": "no-text"}))
        if len(lines) == 10:
            lines.append("")
        lines.append(json.dumps({"id": i, "text": text, "tags": ["carried"]}))
        want_a.append((i, len(lines), text))
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    txt = [t for t in TEXTS[10:] if t]
    (folder / "sub" / "b.txt").write_text("\n".join(txt), encoding="utf8")  # no final newline
    column = TEXTS[3:6] + [None] + TEXTS[6:20]
    pq.write_table(pa.table({"text": column, "n": list(range(len(column)))}), folder / "c.parquet", row_group_size=8)
    return want_a, txt, [(i, t) for i, t in enumerate(column) if t is not None]


@needs_ray
def test_jsonl_text_parquet_tagged_as_nlp_pipe(pipeline, ray_local, expected, tmp_path):
    from spacy_nldm.bulk import tag_corpus

    want_a, txt, want_c = write_inputs(tmp_path / "in")
    warnings = []
    summary = tag_corpus(str(tmp_path / "in"), tmp_path / "out", str(pipeline), workers=2, batch_size=5,
                         probs=True, log=lambda _: None, warn=warnings.append)
    assert (summary.done, summary.skipped, summary.errors) == (3, 0, 3)
    assert summary.docs == len(want_a) + len(txt) + len(want_c)
    a = read_parquet(tmp_path / "out" / "a.parquet")
    assert [(r["id"], r["line"]) for r in a] == [(i, line) for i, line, _ in want_a]
    assert all(r["input_tags"] == ["carried"] for r in a)  # a carried field named like an output column
    check_rows(a, [t for _, _, t in want_a], expected, probs=True)
    b = read_parquet(tmp_path / "out" / "sub" / "b.parquet")
    assert [r["line"] for r in b] == list(range(1, len(txt) + 1))
    check_rows(b, txt, expected, probs=True)
    c = read_parquet(tmp_path / "out" / "c.parquet")
    assert [(r["n"], r["row"]) for r in c] == [(i, i) for i, _ in want_c]
    check_rows(c, [t for _, t in want_c], expected, probs=True)
    import pyarrow.parquet as pq

    metadata = pq.read_schema(tmp_path / "out" / "a.parquet").metadata
    labels = json.loads(metadata[b"spacy_nldm.prob_labels"])
    assert labels == list(spacy.load(pipeline).get_pipe("nldm").labels)
    errors = list(srsly.read_jsonl(tmp_path / "out" / "_errors" / "a.jsonl"))
    assert [(e["line"], e["problem"].split(":")[0]) for e in errors] == [(5, "bad JSON"), (9, "no field 'text'")]
    assert errors[1]["record"] == '{"id": "no-text"}' and errors[0]["file"].endswith("a.jsonl")
    assert [e["row"] for e in srsly.read_jsonl(tmp_path / "out" / "_errors" / "c.jsonl")] == [3]
    assert not (tmp_path / "out" / "_errors" / "sub").exists()
    assert any("a.jsonl: line 5: bad JSON" in w for w in warnings)
    assert not [p for p in (tmp_path / "out").rglob("*.tmp")]
    for path in (tmp_path / "out" / "a.parquet", tmp_path / "out" / "_errors" / "a.jsonl"):
        assert_mode_follows_umask(path)


@needs_ray
def test_resume_skips_finished_shards_through_the_cli(pipeline, ray_local, expected, tmp_path):
    from spacy_nldm.cli import app

    inputs = tmp_path / "in"
    inputs.mkdir()
    shards = {f"s{k}.jsonl": TEXTS[k * 6:(k + 1) * 6] for k in range(4)}
    for name, texts in shards.items():
        srsly.write_jsonl(inputs / name, [{"text": t, "k": name} for t in texts])
    out = tmp_path / "out"
    args = ["tag", str(inputs / "*.jsonl"), str(out), "--model", str(pipeline), "--workers", "2", "-b", "4"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert sorted(path.name for path in out.glob("*.parquet")) == [f"s{k}.parquet" for k in range(4)]
    # a killed run: two shards written, one with a stray temporary file, one missing
    (out / "s1.parquet").unlink()
    (out / "s3.parquet").unlink()
    (out / ".s3.parquet.abc.tmp").write_text("half written")
    kept = {name: os.stat(out / name).st_mtime_ns for name in ("s0.parquet", "s2.parquet")}
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert {name: os.stat(out / name).st_mtime_ns for name in kept} == kept  # the finished shards are skipped
    assert not (out / ".s3.parquet.abc.tmp").exists()
    for name, texts in shards.items():
        rows = read_parquet(out / name.replace(".jsonl", ".parquet"))
        assert {r["k"] for r in rows} == {name}
        check_rows(rows, texts, expected)
    done = {path.name: os.stat(path).st_mtime_ns for path in out.rglob("*") if path.is_file()}
    third = CliRunner().invoke(app, args)  # every shard finished: nothing is tagged or written again
    assert third.exit_code == 0 and {path.name: os.stat(path).st_mtime_ns for path in out.rglob("*") if path.is_file()} == done


def make_crashing_tagger():
    from spacy_nldm.bulk import TaggerActor

    class CrashingTagger(TaggerActor):
        """Kills its own process when it meets CRASH_TEXT for the first time (a marker file remembers)."""

        marker = None

        def records(self, chunks):
            records = super().records(chunks)
            if any(text == CRASH_TEXT for _, _, text, _ in records) and not os.path.exists(self.marker):
                open(self.marker, "w").close()
                os._exit(1)
            return records

    return CrashingTagger


@needs_ray
def test_worker_killed_mid_run_output_complete(pipeline, ray_local, expected, tmp_path):
    import ray.cloudpickle

    from spacy_nldm.bulk import tag_corpus

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor class travels by value
    cls = make_crashing_tagger()
    cls.marker = str(tmp_path / "crashed")
    inputs = tmp_path / "in"
    inputs.mkdir()
    srsly.write_jsonl(inputs / "one.jsonl", [{"text": t, "i": i} for i, t in enumerate(TEXTS[:14])])
    srsly.write_jsonl(inputs / "two.jsonl", [{"text": t, "i": i} for i, t in enumerate(TEXTS[14:])])
    summary = tag_corpus(str(inputs), tmp_path / "out", str(pipeline), workers=2, batch_size=3, log=lambda _: None,
                         warn=lambda _: None, actor_cls=cls)
    assert os.path.exists(cls.marker)  # a worker did die
    assert (summary.done, summary.docs) == (2, len(TEXTS))
    one, two = read_parquet(tmp_path / "out" / "one.parquet"), read_parquet(tmp_path / "out" / "two.parquet")
    assert [r["i"] for r in one] == list(range(14)) and [r["i"] for r in two] == list(range(len(TEXTS) - 14))
    check_rows(one, TEXTS[:14], expected)
    check_rows(two, TEXTS[14:], expected)


@needs_ray
def test_error_in_worker_code_stops_the_run_once(pipeline, ray_local, tmp_path):
    """An exception in the workers' code would come again: the run stops (no retry), nothing is written."""
    import ray.cloudpickle

    from spacy_nldm.bulk import BulkError, TaggerActor, tag_corpus

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class Broken(TaggerActor):
        def records(self, chunks):
            raise ValueError("this pipeline cannot read")

    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf8")
    warnings = []
    with pytest.raises(BulkError, match="a worker failed: ValueError: this pipeline cannot read"):
        tag_corpus(str(tmp_path / "in.txt"), tmp_path / "out", str(pipeline), log=lambda _: None,
                   warn=warnings.append, actor_cls=Broken)
    assert not warnings  # not run again
    assert not (tmp_path / "out" / "in.parquet").exists()


@needs_ray
def test_docbin_output(pipeline, ray_local, expected, tmp_path):
    from spacy_nldm.bulk import tag_corpus

    (tmp_path / "in.txt").write_text("\n".join(t for t in TEXTS if t) + "\n", encoding="utf8")
    summary = tag_corpus(str(tmp_path / "in.txt"), tmp_path / "out", str(pipeline), workers=1, out_format="docbin",
                         log=lambda _: None)
    assert summary.done == 1
    assert_mode_follows_umask(tmp_path / "out" / "in.spacy")
    nlp = spacy.load(pipeline)
    docs = list(DocBin().from_disk(tmp_path / "out" / "in.spacy").get_docs(nlp.vocab))
    texts = [t for t in TEXTS if t]
    assert [d.text for d in docs] == texts
    for i, doc in enumerate(docs):
        tokens, tags, heads, _ = expected[doc.text]
        assert [t.tag_ for t in doc] == tags
        assert [-1 if t._.nldm_head is None else t._.nldm_head for t in doc] == heads
        assert doc.user_data["spacy_nldm.source"] == {"file": "in.txt", "line": i + 1, "fields": {}}


def test_without_ray_the_error_says_what_to_install(pipeline, tmp_path, monkeypatch):
    from spacy_nldm.cli import app

    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf8")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    result = CliRunner().invoke(app, ["tag", str(tmp_path / "in.txt"), str(tmp_path / "out"), "-m", str(pipeline)])
    assert result.exit_code == 1
    assert "spacy-nldm[ray]" in result.output  # what to install
    assert not (tmp_path / "out").exists()


def test_malformed_input_options_fail_clearly(pipeline, tmp_path):
    from spacy_nldm.bulk import BulkError, find_shards

    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(BulkError, match="unknown input format"):
        find_shards(str(tmp_path / "x.csv"), tmp_path / "out")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e.jsonl").write_text("{}\n")
    (tmp_path / "d" / "e.txt").write_text("x\n")
    with pytest.raises(BulkError, match="would both be written"):
        find_shards(str(tmp_path / "d"), tmp_path / "out")
    with pytest.raises(BulkError, match="not a file, a folder or a glob"):
        find_shards(str(tmp_path / "nothing.jsonl"), tmp_path / "out")


def test_a_parquet_shard_that_is_not_parquet_is_an_error_naming_it(tmp_path):
    pytest.importorskip("pyarrow")
    from spacy_nldm.bulk import BulkError, ShardPlan, find_shards, scan_shard

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.parquet").write_text("not parquet\n")
    (shard,) = find_shards(str(tmp_path / "in"), tmp_path / "out")
    with pytest.raises(BulkError, match=r"a\.parquet: not a readable Parquet file"):
        scan_shard(ShardPlan(0, shard), "text", 10)


ENTITY_TEXTS = ["Apple is looking at buying a startup in San Francisco", "", "nothing to see here",
                "apple pie in san francisco , then Apple again"]


@pytest.fixture(scope="module")
def ruler_pipeline(tmp_path_factory):
    """A blank English pipeline with spaCy's entity_ruler (no tagger): it sets Doc.ents and nothing else."""
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([
        {"label": "ORG", "pattern": "Apple"},
        {"label": "GPE", "pattern": [{"LOWER": "san"}, {"LOWER": "francisco"}]}])
    path = tmp_path_factory.mktemp("tag_ents") / "ruler"
    nlp.to_disk(path)
    return path


@needs_ray
def test_entities_in_parquet_and_docbin(ruler_pipeline, ray_local, tmp_path):
    """A pipeline that sets Doc.ents: Parquet has each document's entities (token span, label, characters)
    as nlp.pipe finds them, an empty shard the same columns; the DocBin keeps Doc.ents."""
    import pyarrow.parquet as pq

    from spacy_nldm.bulk import tag_corpus

    nlp = spacy.load(ruler_pipeline)
    texts = ENTITY_TEXTS  # the empty text too: a document without tokens
    want = [[(e.start, e.end, e.label_, e.start_char, e.end_char) for e in doc.ents] for doc in nlp.pipe(texts)]
    assert [len(w) for w in want] == [2, 0, 0, 2]
    inputs = tmp_path / "in"
    inputs.mkdir()
    srsly.write_jsonl(inputs / "a.jsonl", [{"text": t} for t in ENTITY_TEXTS])
    (inputs / "empty.txt").write_text("\n\n", encoding="utf8")
    for out_format in ("parquet", "docbin"):
        summary = tag_corpus(str(inputs), tmp_path / out_format, str(ruler_pipeline), workers=1, batch_size=2,
                             out_format=out_format, log=lambda _: None)
        assert (summary.done, summary.docs) == (2, len(texts))
    rows = read_parquet(tmp_path / "parquet" / "a.parquet")
    got = [[(e["start"], e["end"], e["label"], e["start_char"], e["end_char"]) for e in r["ents"]] for r in rows]
    assert got == want
    for row, text in zip(rows, texts):
        assert [text[e["start_char"]:e["end_char"]] for e in row["ents"]] == [
            " ".join(row["tokens"][e["start"]:e["end"]]) for e in row["ents"]]
    assert pq.read_schema(tmp_path / "parquet" / "empty.parquet").field("ents").type == pq.read_schema(
        tmp_path / "parquet" / "a.parquet").field("ents").type
    docs = list(DocBin().from_disk(tmp_path / "docbin" / "a.spacy").get_docs(nlp.vocab))
    assert [[(e.start, e.end, e.label_, e.start_char, e.end_char) for e in d.ents] for d in docs] == want


@needs_ray
def test_the_entity_components_probabilities_in_parquet(ray_local, tmp_path):
    """crf_ner's entities carry their probability (Span._.nldm_prob) in the Parquet output, and --probs its tag
    marginals."""
    import pyarrow.parquet as pq

    from spacy_nldm.bulk import tag_corpus
    from test_ner_confidence import TEXTS, trained

    nlp = trained("crf_ner", steps=10)
    nlp.to_disk(tmp_path / "model")
    want = [[(e.start, e.end, e.label_, e._.nldm_prob) for e in d.ents] for d in nlp.pipe(TEXTS)]
    assert any(want)
    inputs = tmp_path / "in"
    inputs.mkdir()
    srsly.write_jsonl(inputs / "a.jsonl", [{"text": t} for t in TEXTS])
    tag_corpus(str(inputs), tmp_path / "out", str(tmp_path / "model"), workers=1, batch_size=2, probs=True,
               log=lambda _: None)
    rows = read_parquet(tmp_path / "out" / "a.parquet")
    got = [[(e["start"], e["end"], e["label"], e["prob"]) for e in r["ents"]] for r in rows]
    assert [[g[:3] for g in doc] for doc in got] == [[w[:3] for w in doc] for doc in want]
    for doc_got, doc_want in zip(got, want):
        assert [g[3] for g in doc_got] == pytest.approx([w[3] for w in doc_want], rel=1e-6)
    # --probs: the tag marginals, over the component's tags, which the file's metadata lists
    nlp.get_pipe("crf_ner").store_probs = True
    tags = json.loads(pq.read_schema(tmp_path / "out" / "a.parquet").metadata[b"spacy_nldm.prob_labels"])
    for row, doc in zip(rows, nlp.pipe(TEXTS)):
        assert tags == list(doc._.nldm_prob_labels)
        numpy.testing.assert_allclose(numpy.asarray(row["probs"], dtype="float32"), doc._.nldm_probs, rtol=1e-5, atol=1e-6)
