"""Paths to the test data: a miniature mirror under ``tests/fixtures/mirror`` (the first sentences of a few
files of the project's data mirror, see its README.md). No test reads ``../shared/data``; the few checks
that compare with the full mirror (md5 of the assets) run only where ``SPACY_NLDM_MIRROR`` names it."""
import os
import shutil
import subprocess
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


def project_runner(proj: Path) -> Callable[..., str]:
    """``run(command, *overrides)``: `spacy project run COMMAND` in the project copied to ``proj``, on the
    miniature mirror with the UD datasets te and it (it has no train file), one thread; its stdout. A failed
    command fails the test with the end of its output."""
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def run(command: str, *overrides: str) -> str:
        res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", command, str(proj),
                              f"--vars.mirror={MIRROR}", "--vars.ud_datasets=te,it", *overrides],
                             capture_output=True, text=True, env=env, cwd=proj)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        return res.stdout

    return run
