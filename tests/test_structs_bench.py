"""The structured core's benchmark commands run end to end on tiny shapes and print their tables."""
import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_nldm.cli import app

runner = CliRunner()
CHECKOUT = Path(__file__).resolve().parents[1]


def rows(output: str, first: str):
    return [line for line in output.splitlines() if line.startswith(first)]


def test_bench_long_prints_time_and_peak_memory():
    result = runner.invoke(app, ["bench", "long", "--lengths", "40", "--labels", "4", "--max-dist", "2",
                                 "--tasks", "posterior"])
    assert result.exit_code == 0, result.output
    lines = rows(result.output, "| LatentTree")
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[1:4] == ["40", "4", "2"] and float(cells[4]) >= 0 and float(cells[5]) >= 0


def test_bench_structs_against_a_baseline_checkout():
    """--baseline loads another checkout's structs beside this one (here: this same checkout)."""
    result = runner.invoke(app, ["bench", "structs", "--batch", "2", "--lengths", "6", "--labels", "5",
                                 "--max-dists", "2", "--repeats", "1", "--peer-repeats", "1",
                                 "--threads", "1", "--baseline", str(CHECKOUT)])
    assert result.exit_code == 0, result.output
    for call in ("| tree log Z fwd+bwd", "| tree Viterbi", "| ChainScores log Z fwd+bwd"):
        lines = rows(result.output, call)
        assert len(lines) == 1 and float(lines[0].split("|")[-2]) > 0, call


@pytest.mark.skipif(
    importlib.util.find_spec("torch_struct") is None or importlib.util.find_spec("torchcrf") is None,
    reason="torch-struct and pytorch-crf not installed",
)
def test_bench_structs_peers_prints_speed_and_accuracy_tables():
    result = runner.invoke(app, ["bench", "structs", "--batch", "2", "--lengths", "", "--peers",
                                 "--peer-repeats", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert len(rows(result.output, "| chain-1")) == 12 and len(rows(result.output, "| tree M=1")) == 4
    assert sum("ChainScores, vs pytorch-crf" in line for line in rows(result.output, "| chain-1")) == 4
    by_scale = [line.split("|") for line in result.output.splitlines() if line.startswith(("| 1 |", "| 100 |", "| 1000 |"))]
    assert sorted(len(cells) for cells in by_scale) == [9, 9, 17, 17, 17]  # speed by scale (1, 100), accuracy (1, 100, 1000)
