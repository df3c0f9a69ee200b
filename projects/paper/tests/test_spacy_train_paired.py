"""The seed-paired sign-flip test of `python -m projects.paper spacy-train`'s runs (projects/paper/scripts/spacy_train_paired.py)."""
import itertools

import pytest

from projects.paper.scripts.spacy_train_paired import dataset_average, sign_flip_p


def test_every_dataset_weighs_the_same_in_the_average():
    pairs = {("a", 0): 1.0, ("a", 1): 3.0, ("b", 0): -1.0}
    assert dataset_average(pairs) == pytest.approx((2.0 - 1.0) / 2)


def test_sign_flip_p_is_the_exact_share_of_sign_patterns():
    """Against enumerating all 2^n sign patterns of a small set of pairs: the share whose average is at least as
    far from 0 as the measured one; all pairs agreeing is rare, a pattern centred on 0 gives p = 1."""
    pairs = {("a", 0): 0.5, ("a", 1): 0.2, ("b", 0): 0.4, ("b", 1): -0.1}
    keys = list(pairs)
    observed = abs(dataset_average(pairs))
    exact = sum(abs(dataset_average(pairs, dict(zip(keys, signs)))) >= observed - 1e-12
                for signs in itertools.product((1, -1), repeat=len(keys))) / 2 ** len(keys)
    assert sign_flip_p(pairs, draws=20000) == pytest.approx(exact, abs=0.02)
    agreeing = {(d, s): 0.3 for d in "abcdefgh" for s in range(2)}
    assert sign_flip_p(agreeing, draws=4000) < 0.002  # exact: 2 / 2^16
    assert sign_flip_p({("a", 0): 0.3, ("a", 1): -0.3}, draws=100) == 1.0


def test_an_unknown_dataset_is_named_in_the_error():
    import typer
    from typer.testing import CliRunner

    from projects.paper.scripts.spacy_train_paired import main

    app = typer.Typer()
    app.command()(main)
    result = CliRunner().invoke(app, ["--datasets", "it,xx"])
    assert result.exit_code == 2
    assert "'xx'" in result.output and "tb1" in result.output  # the unknown name, and the names it knows
