"""The README's "Using the components" example runs as written, and does what it says."""
import re

from nldm_fixtures import ROOT


def readme_block(section: str, language: str = "python") -> str:
    text = (ROOT / "README.md").read_text(encoding="utf8")
    body = text[text.index(f"## {section}\n"):]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def test_using_the_components_example_runs_as_written(capsys):
    code = readme_block("Using the components")
    assert "..." not in code
    namespace = {}
    exec(compile(code, "README.md (Using the components)", "exec"), namespace)
    doc, nlp, html = namespace["doc"], namespace["nlp"], namespace["html"]
    labels = nlp.get_pipe("nldm_tagger").labels
    assert len(doc) == 4 and all(t.tag_ in labels for t in doc)
    assert nlp.evaluate(namespace["examples"])["tag_acc"] == 1.0  # it has learnt the two examples
    heads = [t._.nldm_head for t in doc]
    assert None in heads and all(h is None or 0 <= h < len(doc) for h in heads)
    assert isinstance(doc._.nldm_tree_score, float) and "<svg" in html
    printed = capsys.readouterr().out
    assert str([(t.text, t.tag_, t._.nldm_head) for t in doc]) in printed


def test_readme_tables_are_in_step_with_their_files():
    """Every table the README copies (between ``<!-- table: FILE -->`` markers) equals FILE's table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "scripts" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.blocks((ROOT / "README.md").read_text(encoding="utf8"))
    assert {source for source, _, _ in found} >= {"results/accuracy.md", "metrics/reference/twitter.md"}
    for source, copy, table in found:
        assert copy == table, f"README.md's copy of {source} is out of step: python scripts/readme_tables.py"
        assert table.count("\n") >= 3, f"{source} has no table"
