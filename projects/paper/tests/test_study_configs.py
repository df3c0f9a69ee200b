"""Every config of the study (projects/paper/configs/*.cfg), with the checks of the library's shipped configs
(tests/config_checks.py): built as `spacy train` builds it and trained a few steps on fixture tweets, the same
predictions whatever the batch, empty input through every method, and a tiny learnable task learnt. The configs
that `python -m projects.paper derive-configs` writes are built and validated only."""
import pytest

from config_checks import (FLOOR, check_derived_config_builds_as_spacy_train_builds_it,
                           check_empty_docs_and_examples_pass_through_every_method,
                           check_predictions_do_not_depend_on_the_batch, derived, train_shipped)
from nldm_fixtures import ROOT

CONFIGS = sorted((ROOT / "projects" / "paper" / "configs").glob("*.cfg"))
DERIVED = derived(CONFIGS)
TRAINED = [p for p in CONFIGS if p not in DERIVED]


def test_every_config_is_covered():
    assert len(CONFIGS) >= 7 and {"nldm_trf.cfg", "synthetic_nldm.cfg"} <= {p.name for p in TRAINED}
    assert {p.name for p in DERIVED} == {"crf1_trf.cfg", "crf2_trf.cfg", "softmax_trf.cfg"}


@pytest.mark.parametrize("path", DERIVED, ids=[p.name for p in DERIVED])
def test_derived_configs_build_as_spacy_train_builds_them(path):
    check_derived_config_builds_as_spacy_train_builds_it(path)


@pytest.fixture(scope="module", params=TRAINED, ids=[p.name for p in TRAINED])
def shipped(request):
    return train_shipped(request.param)


def test_predictions_do_not_depend_on_the_batch(shipped):
    check_predictions_do_not_depend_on_the_batch(shipped[0])


def test_empty_docs_and_examples_pass_through_every_method(shipped):
    check_empty_docs_and_examples_pass_through_every_method(*shipped[:2])


def test_ten_steps_on_a_tiny_task_lift_the_accuracy_above_a_floor(shipped):
    _, _, (untrained, learned) = shipped
    assert untrained < FLOOR < learned, (untrained, learned)
