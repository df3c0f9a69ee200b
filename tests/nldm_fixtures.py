"""Paths to the test data: a miniature mirror under ``tests/fixtures/mirror`` (the first sentences of a few
files of the project's data mirror, see its README.md). No test reads ``../shared/data``; the few checks
that compare with the full mirror (md5 of the assets) run only where ``SPACY_NLDM_MIRROR`` names it."""
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the study's modules (projects.paper.*) import from the repository root
    sys.path.append(str(ROOT))
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MIRROR = FIXTURES / "mirror"
TWITTER = MIRROR / "twitter_pos"


def full_mirror() -> Optional[Path]:
    """The full data mirror named by the environment variable ``SPACY_NLDM_MIRROR``, or None."""
    path = os.environ.get("SPACY_NLDM_MIRROR")
    return Path(path) if path and Path(path).is_dir() else None


def train_tweet_pipeline(path: Path, n_tweets: int = 24, steps: int = 3) -> Path:
    """configs/nldm.cfg trained for a few steps on the first ARK training tweets, saved to ``path``."""
    from spacy.tokens import Doc
    from spacy.training import Example
    from spacy.util import load_config, load_model_from_config

    from spacy_nldm.corpora.ark import read_ark

    tweets = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:n_tweets]
    nlp = load_model_from_config(load_config(ROOT / "configs" / "nldm.cfg"), auto_fill=True, validate=True)
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in tweets]
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(steps):
        nlp.update(egs, sgd=optimizer)
    nlp.to_disk(path)
    return path


# A tiny learnable task: each word has one Twitter tag wherever it stands (5 tags, 6 orders of the same words).
LEARNABLE_WORDS = {"zorp": "N", "blicks": "V", "the": "D", "@mia": "@", "#tbt": "#"}
LEARNABLE = [(list(order), [LEARNABLE_WORDS[w] for w in order]) for order in (
    ["zorp", "blicks", "the", "@mia", "#tbt"], ["the", "zorp", "blicks", "#tbt", "@mia"],
    ["@mia", "the", "zorp", "blicks", "#tbt"], ["#tbt", "@mia", "the", "zorp", "blicks"],
    ["blicks", "#tbt", "@mia", "the", "zorp"], ["the", "#tbt", "blicks", "zorp", "@mia"],
)]
#: 5 balanced tags: a model that has not learnt the words is far below
LEARNABLE_FLOOR = 0.6


def copy_project(dest: Path) -> Path:
    """project.yml, configs/ and projects/ (the scripts) copied to ``dest`` (what `spacy project run` needs)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "project.yml", dest / "project.yml")
    shutil.copytree(ROOT / "configs", dest / "configs")
    shutil.copytree(ROOT / "projects", dest / "projects", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run_project_command(proj: Path, command: str, *overrides: str) -> None:
    """`spacy project run COMMAND PROJ --vars.KEY=VALUE ...` from this process (weasel's ``project_run``, what the
    CLI calls; each of the command's steps runs in a process of its own, one torch thread): the test process
    has spaCy imported already, which saves an interpreter's start per call. A failed step fails the test
    (its output is the test's captured output)."""
    import pytest
    from weasel.cli.run import project_run

    values = dict(override[2:].split("=", 1) for override in overrides)
    threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        project_run(proj, command, overrides=values, parent_command="python -m spacy")
    except SystemExit as stop:
        pytest.fail(f"`spacy project run {command}` failed (exit {stop.code}): see the captured output")
    finally:
        if threads is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = threads


def project_runner(proj: Path) -> Callable[..., None]:
    """``run(command, *overrides)``: `spacy project run COMMAND` in the project copied to ``proj``, on the
    miniature mirror with the UD datasets te and it (it has no train file), one thread
    (:func:`run_project_command`)."""

    def run(command: str, *overrides: str) -> None:
        run_project_command(proj, command, f"--vars.mirror={MIRROR}", "--vars.ud_datasets=te,it", *overrides)

    return run
