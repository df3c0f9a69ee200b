"""``python -m projects.paper long``: one row per task with the shape asked for, measured in its own process,
and the same table written to --output."""
from typer.testing import CliRunner

from projects.paper.cli import app


def cells(line: str):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_long_prints_one_row_per_task_with_its_shape_and_writes_the_same_table(tmp_path):
    out = tmp_path / "long.md"
    result = CliRunner().invoke(app, ["long", "--lengths", "40", "--labels", "4", "--max-dist", "2",
                                      "--tasks", "viterbi,marginals", "--output", str(out)])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith("|")]
    assert cells(table[0]) == ["what", "n", "M", "k", "seconds", "peak MB"]
    body = table[2:]
    assert [cells(line)[:4] for line in body] == [["LatentTree viterbi", "40", "4", "2"],
                                                  ["LatentTree marginals", "40", "4", "2"]]
    for line in body:  # a measurement that failed says so in its row (and the command still exits 0)
        seconds, peak = cells(line)[4:6]
        assert not seconds.startswith("failed"), seconds
        float(seconds), float(peak)  # numbers, not a failure message
    assert out.read_text().splitlines() == table
