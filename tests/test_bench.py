"""`bench pipeline` runs end to end on a few tweets and prints its table."""
from typer.testing import CliRunner

from nldm_fixtures import MIRROR, TWITTER

from spacy_nldm.cli import app

runner = CliRunner()
WNUT = MIRROR / "ner" / "wnut17"


def table_rows(output: str):
    """Data rows of the Markdown tables in ``output``: not the header (``| B |``, ``| system |``) or the rule."""
    headers = ("| B |", "| system |", "|---")
    return [line for line in output.splitlines() if line.startswith("| ") and not line.startswith(headers)]


def assert_ratios_of_the_cpu_rates(rows, baseline, columns):
    """Each row's (train, tag) ratio columns are its CPU words per second (columns 3 and 5, printed as integers)
    over the baseline's, to the ratios' two printed decimals."""
    cells = {name: [float(c) for c in row.split("|")[2:-1]] for name, row in rows.items()}
    for name, row in cells.items():
        for rate, column in zip((3, 5), columns):
            this, base, ratio = row[rate - 2], cells[baseline][rate - 2], row[column - 2]
            low, high = (this - 0.5) / (base + 0.5), (this + 0.5) / (base - 0.5)
            assert low - 0.005 <= ratio <= high + 0.005, (name, column, this, base, ratio)


def test_bench_pipeline_compares_with_the_crf(tmp_path):
    out = tmp_path / "pipeline.md"
    result = runner.invoke(
        app,
        ["bench", "pipeline", str(TWITTER / "oct27.train"), "--limit", "12", "--systems", "crf order 1,nldm,nldm store_tree=false", "--threads", "1",
         "--width", "16", "--rank", "16", "--label-dim", "8", "--warmup", "1", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    rows = {r.split("|")[1].strip(): r for r in table_rows(out.read_text())}
    assert set(rows) == {"crf order 1", "nldm", "nldm store_tree=false"}
    assert_ratios_of_the_cpu_rates(rows, "crf order 1", (6, 7))


def test_bench_pipeline_needs_an_existing_data_file(tmp_path):
    result = runner.invoke(app, ["bench", "pipeline", str(tmp_path / "none.txt"), "--limit", "2"])
    assert result.exit_code == 1 and str(tmp_path / "none.txt") in result.output


def test_bench_pipeline_times_the_entity_components_beside_spacy_ner(tmp_path):
    out = tmp_path / "ner.md"
    result = runner.invoke(
        app,
        ["bench", "pipeline", str(WNUT / "wnut17train.conll"), "--task", "ner", "--limit", "12", "--threads", "1",
         "--width", "16", "--rank", "16", "--label-dim", "8", "--warmup", "1", "--rounds", "1", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    rows = {r.split("|")[1].strip(): r for r in table_rows(out.read_text())}
    assert set(rows) == {"nldm_ner", "crf_ner", "spacy ner"}
    assert_ratios_of_the_cpu_rates(rows, "crf_ner", (6, 7))
    assert_ratios_of_the_cpu_rates(rows, "spacy ner", (8, 9))
    # the taggers' systems are not entity systems
    result = runner.invoke(app, ["bench", "pipeline", str(WNUT / "wnut17train.conll"), "--task", "ner",
                                 "--systems", "crf order 1"])
    assert result.exit_code != 0 and "crf_ner" in result.output
