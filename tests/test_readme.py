"""The README's quick-start example runs as written and does what it says, and every figure that README.md
and docs/ copy from a result file is in step with that file (projects/paper/scripts/readme_tables.py)."""
import importlib.util
import re

import pytest

from brute import assert_heads_form_a_tree
from nldm_fixtures import ROOT


def readme_block(section: str, language: str = "python") -> str:
    text = (ROOT / "README.md").read_text(encoding="utf8")
    body = text[text.index(f"## {section}\n"):]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def readme_tables():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "projects" / "paper" / "scripts" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("component", ["nldm_tagger", "crf_tagger"])
def test_quick_start_example_runs_as_written_for_both_components(component, capsys):
    """The snippet as written (nldm_tagger), and with the other name its comment offers, learns its two
    examples; the NLDM also decodes a tree over every token and draws it."""
    code = readme_block("Quick start")
    assert "..." not in code and 'name = "nldm_tagger"  # or "crf_tagger"' in code
    switched = code.replace('name = "nldm_tagger"', f'name = "{component}"')
    assert (switched != code) == (component != "nldm_tagger")  # the name the comment offers is what runs
    code = switched
    namespace = {}
    exec(compile(code, "README.md (Quick start)", "exec"), namespace)
    doc, nlp = namespace["doc"], namespace["nlp"]
    labels = nlp.get_pipe(component).labels
    assert len(doc) == 4 and all(t.tag_ in labels for t in doc)
    assert nlp.evaluate(namespace["examples"])["tag_acc"] == 1.0  # it has learnt the two examples
    printed = capsys.readouterr().out
    assert str([(t.text, t.tag_) for t in doc]) in printed
    if component == "nldm_tagger":
        assert_heads_form_a_tree([t._.nldm_head for t in doc])
        assert isinstance(doc._.nldm_tree_score, float) and "<svg" in namespace["html"]
    else:
        assert "html" not in namespace and doc._.nldm_tree_score is None


@pytest.mark.parametrize("component", ["crf_ner", "nldm_ner"])
def test_the_entity_example_runs_as_written_for_both_components(component, capsys):
    """The entity snippet (crf_ner, and nldm_ner as its comment offers) learns its example's entities and prints
    each with its probability."""
    code = readme_block("Named entities")
    assert 'nlp.add_pipe("crf_ner")  # or "nldm_ner"' in code
    switched = code.replace('nlp.add_pipe("crf_ner")', f'nlp.add_pipe("{component}")')
    assert (switched != code) == (component != "crf_ner")  # the name the comment offers is what runs
    code = switched
    namespace = {}
    exec(compile(code, "README.md (Named entities)", "exec"), namespace)
    doc = namespace["doc"]
    assert [(e.text, e.label_) for e in doc.ents] == [("Ana Sol", "person"), ("Oslo", "location")]
    assert str([(e.text, e.label_, round(e._.nldm_prob, 2)) for e in doc.ents]) in capsys.readouterr().out


def test_the_readme_quotes_its_figures_from_the_result_tables():
    """The headline and the results summary are checked blocks citing the tables they come from."""
    module = readme_tables()
    text = (ROOT / "README.md").read_text(encoding="utf8")
    sources = {source for sources, _ in module.figure_blocks(text) for source in sources}
    assert {"projects/paper/results/table2.md", "projects/paper/results/spacy_train.md",
            "projects/paper/results/minilm.md"} <= sources
    headline = text[:text.index("## Install")]
    assert "<!-- figures: projects/paper/results/table2.md -->" in headline


def test_docs_results_copies_the_tables_the_readme_cites():
    module = readme_tables()
    copied = {source for source, _, _ in module.blocks((ROOT / "docs" / "results.md").read_text(encoding="utf8"))}
    assert {"projects/paper/results/table2.md", "projects/paper/results/accuracy.md", "projects/paper/results/reference/twitter.md", "projects/paper/results/glove.md",
            "projects/paper/results/glove_en.md", "projects/paper/results/glove_bilstm_tuned.md",
            "projects/paper/results/glove_bilstm_chars.md", "projects/paper/results/glove_bilstm_arc_length.md", "projects/paper/results/minilm.md",
            "projects/paper/results/synthetic/table.md"} <= copied


@pytest.mark.parametrize("path", ["README.md", "docs/results.md", "docs/reproduction.md", "docs/model.md"])
def test_copied_tables_and_quoted_figures_are_in_step_with_their_files(path):
    """Every table copied between ``<!-- table: FILE -->`` markers equals FILE's table, and every figure
    between ``<!-- figures: FILE ... -->`` markers occurs in one of those files."""
    module = readme_tables()
    text = (ROOT / path).read_text(encoding="utf8")
    for source, copy, table in module.blocks(text):
        assert copy == table, f"{path}'s copy of {source} is out of step: python -m projects.paper.scripts.readme_tables"
        assert table.count("\n") >= 3, f"{source} has no table"
    for sources, missing in module.figure_blocks(text):
        assert not missing, f"{path}: figures that {' '.join(sources)} do not hold: {missing}"


def test_the_figures_check_catches_a_figure_no_table_holds(tmp_path, monkeypatch):
    module = readme_tables()
    (tmp_path / "table.md").write_text("| NLDM | 91.95 | −0.01 |\n", encoding="utf8")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    block = "<!-- figures: table.md -->\nNLDM 91.95 (−0.01), CRF1 91.97, +0.01\n<!-- /figures -->\n"
    assert module.figure_blocks(block) == [(["table.md"], ["91.97", "+0.01"])]
    assert module.numbers("0.6-0.75, −0.01, (+0.64), r2.5, 1.2.3") == [
        ("", "0.6"), ("", "0.75"), ("-", "0.01"), ("+", "0.64")]
