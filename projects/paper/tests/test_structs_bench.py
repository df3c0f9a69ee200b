"""The structured core's benchmark commands run end to end on tiny shapes and print the tables they promise: a
row per measurement, with the shape asked for, no failed measurement, the ratio columns filled where they
apply, and a baseline compared only where it computes the same structures. (Timings themselves belong in
the benchmark commands, not in tests.)"""
import importlib.util
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_nldm import structs
from projects.paper import peers as bench_peers
from projects.paper.cli import app

runner = CliRunner()
CHECKOUT = Path(__file__).resolve().parents[3]  # the repository root


def rows(output: str, first: str):
    return [line for line in output.splitlines() if line.startswith(first)]


def cells(line: str):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text: str) -> float:
    assert not text.startswith("failed"), text
    return float(text)


def test_bench_structs_grid_has_the_ratio_columns_and_the_reference_only_up_to_its_length():
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "4,6", "--labels", "3",
                                 "--max-dists", "2", "--repeats", "1", "--reference-up-to", "4", "--threads", "1"])
    assert result.exit_code == 0, result.output
    header = cells(rows(result.output, "| B |")[0])
    assert header[-3:] == ["NLDM/CRF-1", "reference fwd+bwd s", "reference/ours"]
    short, long = (cells(rows(result.output, f"| 2 | {n} | 3 | 2 |")[0]) for n in (4, 6))
    for row in (short, long):
        assert len(row) == len(header)
        number(row[4]), number(row[5]), number(row[6]), number(row[9]), number(row[10])
    number(short[11]), number(short[12])
    assert long[11:] == ["-", "-"]  # n = 6 > --reference-up-to 4: the reference is not timed


def ratio_agrees(this: float, baseline: float, ratio: float, digits: int = 4) -> bool:
    """``ratio`` (2 decimals) is this / baseline, given that both were printed with ``digits`` decimals."""
    h = 0.5 * 10 ** -digits
    low = max(this - h, 0.0) / (baseline + h)
    high = (this + h) / (baseline - h) if baseline > h else float("inf")
    return low - 0.005 <= ratio <= high + 0.005


def test_bench_structs_against_a_baseline_checkout():
    """--baseline loads another checkout's structs beside this one (here: this same checkout): a row per call
    and shape, this / baseline in the last column."""
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "6", "--labels", "5",
                                 "--max-dists", "2", "--repeats", "1", "--peer-repeats", "1",
                                 "--threads", "1", "--baseline", str(CHECKOUT)])
    assert result.exit_code == 0, result.output
    assert cells(rows(result.output, "| call |")[0]) == ["call", "this checkout s", "baseline s", "this / baseline"]
    for call in ("| tree log Z fwd+bwd, B=2, n=6, M=5, max_dist=2 |", "| tree Viterbi, B=2, n=6, M=5, max_dist=2 |",
                 "| ChainScores log Z fwd+bwd, B=2, n=6, M=5 |"):
        lines = rows(result.output, call)
        assert len(lines) == 1, call
        _, this, baseline, ratio = cells(lines[0])
        assert ratio_agrees(number(this), number(baseline), number(ratio)), lines[0]


def test_a_baseline_whose_viterbi_differs_is_not_timed():
    """The baseline comparison times the same structures: a baseline decoding other labels is refused."""
    assert len(bench_peers.baseline_rows(structs, 2, [(6, 3, 2)], 1)) == 3

    def other_viterbi(scores, lengths, max_dist=None):
        best = structs.viterbi(scores, lengths, max_dist=max_dist)
        return types.SimpleNamespace(labels=(best.labels + 1) % scores.shape[-1], heads=best.heads)

    other = types.SimpleNamespace(**{name: getattr(structs, name) for name in dir(structs) if not name.startswith("_")})
    other.viterbi = other_viterbi
    with pytest.raises(AssertionError, match="Viterbi differs"):
        bench_peers.baseline_rows(other, 2, [(6, 3, 2)], 1)


@pytest.mark.skipif(
    importlib.util.find_spec("torch_struct") is None or importlib.util.find_spec("torchcrf") is None,
    reason="torch-struct and pytorch-crf not installed",
)
def test_bench_structs_peers_prints_speed_and_accuracy_tables():
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "", "--peers",
                                 "--peer-repeats", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert len(rows(result.output, "| chain-1")) == 12 and len(rows(result.output, "| tree M=1")) == 4
    assert sum("ChainScores, vs pytorch-crf" in line for line in rows(result.output, "| chain-1")) == 4
    by_scale = [line.split("|") for line in result.output.splitlines() if line.startswith(("| 1 |", "| 100 |", "| 1000 |"))]
    assert sorted(len(cells) for cells in by_scale) == [9, 9, 17, 17, 17]  # speed by scale (1, 100), accuracy (1, 100, 1000)


def test_chain_inputs_without_pytorch_crf(monkeypatch):
    """Without pytorch-crf installed, the benchmark's chain inputs still carry its three parameters, and our
    potentials of them give the log Z of every tag sequence enumerated (start + emissions + transitions
    [previous, current] + end)."""
    import importlib.util
    import itertools

    import torch

    from spacy_nldm import structs
    from projects.paper import peers as bench_peers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchcrf" else real(name, *a))
    crf, em, tags, lengths, mask = bench_peers.chain_inputs(2, 5, 3, scale=2.0, dtype=torch.float64)
    assert crf.transitions.shape == (3, 3) and em.shape == (2, 5, 3) and bool(mask.all())
    log_z = structs.crf_log_partition(bench_peers.our_potentials(crf, em, lengths), lengths)
    with torch.no_grad():
        paths = torch.stack([
            crf.start_transitions[y[0]] + em[:, range(5), list(y)].sum(-1)
            + sum(crf.transitions[a, b] for a, b in zip(y, y[1:])) + crf.end_transitions[y[-1]]
            for y in itertools.product(range(3), repeat=5)], -1)
    torch.testing.assert_close(log_z.detach(), torch.logsumexp(paths, -1), rtol=1e-12, atol=1e-12)


def test_bench_structs_lanes_times_every_lane_against_the_reference():
    """--lanes: a row per lane and input, with that lane's time, the reference's and their ratio."""
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "", "--lanes",
                                 "--peer-repeats", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    header = rows(result.output, "| structure |")
    assert cells(header[0]) == ["structure", "call", "shape", "lane", "lane s", "reference s", "lane / reference"]
    body = [cells(line) for line in rows(result.output, "| tree |") + rows(result.output, "| chain-")]
    assert {row[3] for row in body} >= {"compiled", "factored", "bounded", "gold", "trigram"}
    for row in body:
        assert ratio_agrees(number(row[4]), number(row[5]), number(row[6])), row


def test_bench_structs_constraints_times_each_chain_with_and_without_the_rules():
    """--constraints: a row per call and shape, with both times and their ratio."""
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "", "--constraints",
                                 "--peer-repeats", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    header = rows(result.output, "| call | shape |")
    assert cells(header[0]) == ["call", "shape", "constrained s", "unconstrained s", "constrained / unconstrained"]
    body = [cells(line) for line in rows(result.output, "| chain-")]
    calls = ("chain-1 log Z fwd+bwd, ChainScores", "chain-1 log Z fwd+bwd, potentials",
             "chain-2 log Z fwd+bwd, SecondOrderScores", "chain-1 Viterbi, ChainScores")
    shapes = [f"n<={n}, M={m} ({scheme})" for n in (20, 40) for m, scheme in ((13, "BIO"), (25, "BILUO"))]
    assert sorted((row[0], row[1]) for row in body) == sorted((call, shape) for call in calls for shape in shapes)
    for row in body:
        assert ratio_agrees(number(row[2]), number(row[3]), number(row[4])), row


def table_rows(output: str):
    """Data rows of the Markdown tables in ``output``: not the header (``| B |``) or the rule."""
    return [line for line in output.splitlines() if line.startswith("| ") and not line.startswith(("| B |", "|---"))]


def test_bench_structs_prints_one_row_per_shape():
    result = runner.invoke(
        app,
        ["structs", "--batch", "2", "--lengths", "4", "--labels", "2", "--max-dists", "none,2",
         "--repeats", "1", "--reference-up-to", "4", "--threads", "1"],
    )
    assert result.exit_code == 0, result.output
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in table_rows(result.output) if r.startswith("| 2 |")]
    # one row per shape (each shape in a process of its own: 1 length x 2 max_dists), in order, every column
    # filled: none failed, and the reference and its ratio timed (length 4 <= --reference-up-to 4)
    assert [r[:4] for r in rows] == [["2", "4", "2", k] for k in ("none", "2")]
    for row in rows:
        assert len(row) == 13 and all(cell and cell != "-" and not cell.startswith("failed") for cell in row), row
        [float(cell) for cell in row[4:]]


def test_bench_structs_nbest_times_the_k_best_and_the_span_probabilities():
    """--nbest: crf_nbest against the 1-best decode, a row per scores, M and rules; the span probabilities
    against the marginals, a row per structure, M and number of spans, with the lane that computed them."""
    result = runner.invoke(app, ["structs", "--batch", "2", "--lengths", "", "--nbest",
                                 "--peer-repeats", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert cells(rows(result.output, "| scores |")[0])[-1] == "n-best / 1-best"
    body = [cells(line) for line in rows(result.output, "| ChainScores |") + rows(result.output, "| SecondOrderScores |")]
    assert sorted((row[0], row[2], row[3]) for row in body) == sorted(
        (scores, m, rules) for scores in ("ChainScores", "SecondOrderScores") for m in ("17", "25") for rules in ("no", "yes"))
    for row in body:
        assert ratio_agrees(number(row[4]), number(row[5]), number(row[6])), row
    spans = [cells(line) for line in rows(result.output, "| chain-1 (ChainScores) |") + rows(result.output, "| NLDM")]
    assert len(spans) == 6 and {row[5] for row in spans} == {"mask", "closed"}
    for row in spans:
        assert ratio_agrees(number(row[6]), number(row[7]), number(row[8])), row
