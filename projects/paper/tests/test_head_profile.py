"""scripts/head_profile.py --breakdown: the timers wrap the functions the head calls for the run only, and each
part of the split is time spent inside its function (the kernel's inside label_marginals' own)."""
import spacy_nldm.structs as structs
from spacy_nldm.structs import compiled_subtrees

from projects.paper.scripts.head_profile import TIMED, breakdown, timers


def test_the_timers_count_calls_and_put_the_functions_back():
    before = structs.label_marginals, compiled_subtrees.inside_outside
    took = {}
    with timers(took):
        assert structs.label_marginals is not before[0]
        assert structs.label_marginals.__wrapped__ is before[0]
    assert (structs.label_marginals, compiled_subtrees.inside_outside) == before
    assert took == {}  # nothing was called


class _Head:
    """A stand-in for a component whose predict_scored calls two of the timed functions."""

    def __init__(self):
        self.calls = 0

    def predict_scored(self, batch, scores):
        import time

        self.calls += 1
        structs.label_marginals(batch, scores)
        time.sleep(0.002)


def test_the_split_adds_up_and_takes_the_kernel_out_of_label_marginals(monkeypatch):
    import time

    def marginals(*args):
        compiled_subtrees.inside_outside()
        time.sleep(0.002)

    monkeypatch.setattr(structs, "label_marginals", marginals)
    monkeypatch.setattr(compiled_subtrees, "inside_outside", lambda: time.sleep(0.004))
    head = _Head()
    row = breakdown(head, [[1], [2]], [None, None], rounds=2)
    assert head.calls == 4
    assert row["kernel"] >= 2 * 0.004
    assert row["label marginals"] >= 2 * 0.002
    assert row["rest"] >= 2 * 0.002
    parts = row["kernel"] + row["label marginals"] + row.get("canonical tree", 0.0) + row.get("segments", 0.0)
    assert abs(parts + row["rest"] - row["predict_scored"]) < 0.01
    assert {label for label, _, _ in TIMED} >= {"kernel", "label marginals"}
