"""The plain training loop a new user writes, used to compare taggers side by side.

``nlp.add_pipe(factory, config=...)``, ``nlp.initialize`` with its default optimizer (or one given as
a thinc registry config), ``nlp.update`` on shuffled batches of ``batch_size`` sentences for ``epochs``
epochs, then token accuracy on the held-out sentences with the final weights ("acc") and with the
optimizer's averaged weights ("acc_avg", what ``spacy train`` evaluates). Every system of a
comparison gets the same data, seed, batches and optimizer. One run = one :class:`RunSpec`; runs are
executed in a fresh process each (:func:`child`) at one torch thread.
"""
import contextlib
import importlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from ..registry import LANGS, LOOP_DATASETS, RECORD_KEYS, canonical, corpus_folder
from .queue import Run, RunFailed, run_queue
from .records import RunsFile

#: the datasets of the comparison (the registry's keys; ``tw`` is read as ``twitter``): name -> folder under
#: the corpus directory, language of spacy.blank (Maltese: "xx", spaCy has no Maltese language class)
DATASETS: Dict[str, Dict[str, str]] = {key: {"path": corpus_folder(key), "lang": LANGS[key]} for key in LOOP_DATASETS}

#: spaCy's ``tagger`` reads labels starting with its ``neg_prefix`` ("!" by default) as negative
#: annotations; the ARK tag "!" (interjection) would be lost, so the baseline gets a prefix no label has
SOFTMAX_CONFIG = {"neg_prefix": "<no-negative-labels>"}

#: the study's scripts (``RunSpec.setup`` names a patch there); the records name them ``scripts.<module>``, as
#: they were imported from the repository root before they moved, and keep those keys
STUDY_SCRIPTS = "projects.paper.scripts."


@dataclass
class RunSpec:
    """One training run. ``config`` is the component's config (nested dicts, spaCy's format) on top
    of the factory's defaults; ``optimizer`` a thinc registry config (None: spaCy's default Adam)."""

    dataset: str
    system: str  # a label for the tables
    factory: str  # "tagger", "crf_tagger", "nldm_tagger"
    seed: int = 0
    epochs: int = 10
    batch_size: int = 16
    drop: float = 0.0
    config: Dict = field(default_factory=dict)
    optimizer: Optional[Dict] = None
    corpus: str = "corpus"
    eval_split: str = "test"
    setup: Optional[str] = None

    def __post_init__(self):
        self.dataset = canonical(self.dataset)

    def key(self) -> str:
        """Identity of the run in a results file (everything but the corpus folder); the dataset under the
        name the records give it (``tw`` for ``twitter``), so that every recorded run is found again."""
        d = asdict(self)
        d.pop("corpus")
        d["dataset"] = RECORD_KEYS.get(d["dataset"], d["dataset"])
        if d["setup"] is None:  # runs without a patch keep the key they had before the field existed
            d.pop("setup")
        elif d["setup"].startswith(STUDY_SCRIPTS):  # the name the study's scripts had in the records
            d["setup"] = "scripts." + d["setup"][len(STUDY_SCRIPTS):]
        return json.dumps(d, sort_keys=True)


def _examples(nlp, path: Path):
    from spacy.tokens import DocBin
    from spacy.training import Example

    if not path.exists():
        raise FileNotFoundError(f"{path}: no such corpus file (run `spacy project run corpora`, then `spacy project run ud-corpora projects/paper`)")
    docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    return [Example(_tokens_only(nlp, doc), doc) for doc in docs]


def _tokens_only(nlp, doc):
    """The reference doc's tokens without annotation (the paper tags the given tokens)."""
    from spacy.tokens import Doc

    return Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])


def train(spec: RunSpec):
    """Train one system as the module docstring says; return ``(nlp, optimizer, held_out examples,
    summed loss per epoch, process CPU seconds, wall seconds)``."""
    import spacy
    import torch
    from spacy.util import fix_random_seed, minibatch, registry

    torch.set_num_threads(1)
    if spec.setup:
        module, _, function = spec.setup.partition(":")
        getattr(importlib.import_module(module), function)()
    fix_random_seed(spec.seed)
    info = DATASETS[spec.dataset]
    nlp = spacy.blank(info["lang"])
    config = dict(spec.config)
    if spec.factory == "tagger":
        config = {**SOFTMAX_CONFIG, **config}
    else:
        config.setdefault("attr", "tag")
    nlp.add_pipe(spec.factory, name="tagger", config=config)
    root = Path(spec.corpus) / info["path"]
    train_examples = _examples(nlp, root / "train.spacy")
    held_out = _examples(nlp, root / f"{spec.eval_split}.spacy")
    optimizer = None
    if spec.optimizer is not None:
        optimizer = registry.resolve({"optimizer": spec.optimizer})["optimizer"]
    start = time.process_time()
    wall = time.perf_counter()
    sgd = nlp.initialize(lambda: train_examples, sgd=optimizer)
    rng = random.Random(spec.seed)
    losses_per_epoch = []
    for _ in range(spec.epochs):
        order = list(train_examples)
        rng.shuffle(order)
        losses: Dict[str, float] = {}
        for batch in minibatch(order, size=spec.batch_size):
            nlp.update(batch, sgd=sgd, drop=spec.drop, losses=losses)
        losses_per_epoch.append(round(losses.get("tagger", 0.0), 2))
    return nlp, sgd, held_out, losses_per_epoch, time.process_time() - start, time.perf_counter() - wall


def train_and_score(spec: RunSpec) -> Dict:
    """Train one system (:func:`train`) and return its accuracies and timings."""
    nlp, sgd, held_out, losses_per_epoch, train_cpu, train_wall = train(spec)
    acc = nlp.evaluate(held_out)["tag_acc"]
    with nlp.use_params(sgd.averages):
        acc_avg = nlp.evaluate(held_out)["tag_acc"]
    by_decoder = {}
    emission_only = None
    pipe = nlp.get_pipe("tagger")
    if spec.factory != "tagger":  # the same weights scored with each decoder (a paired comparison)
        configured = pipe.decode
        for decoder in ("viterbi", "posterior"):
            pipe.decode = decoder
            by_decoder[decoder] = round(100 * nlp.evaluate(held_out)["tag_acc"], 2)
        pipe.decode = configured
        with _interactions_zeroed(pipe):
            emission_only = round(100 * nlp.evaluate(held_out)["tag_acc"], 2)
    return {
        "acc": round(100 * acc, 2),
        "acc_avg": round(100 * acc_avg, 2),
        "acc_by_decoder": by_decoder,
        "acc_emission_only": emission_only,
        "train_cpu_s": round(train_cpu, 1),
        "train_wall_s": round(train_wall, 1),
        "losses": losses_per_epoch,
    }


def is_emission(name: str) -> bool:
    """Whether a parameter of the torch head (its name in ``named_parameters``) belongs to the emission
    layer (W, b); every other head parameter scores label interactions."""
    return name.rsplit(".", 1)[-1] in ("W", "b")


@contextlib.contextmanager
def _interactions_zeroed(pipe):
    """The trained structured tagger with every parameter but the emission (W, b) at zero: a softmax
    tagger over its own emissions (how much of the accuracy the label interactions carry)."""
    import torch

    from spacy_nldm.models.tagger import torch_scorer

    scorer = torch_scorer(pipe.model)
    saved = {name: p.detach().clone() for name, p in scorer.named_parameters()}
    with torch.no_grad():
        for name, p in scorer.named_parameters():
            if not is_emission(name):
                p.zero_()
    try:
        yield
    finally:
        with torch.no_grad():
            for name, p in scorer.named_parameters():
                p.copy_(saved[name])


def load_results(path: Path) -> Dict[str, Dict]:
    """Finished runs of a runs file (:class:`.records.RunsFile`), by :meth:`RunSpec.key`."""
    return RunsFile(path).rows()


def _child_env() -> Dict[str, str]:
    """The environment of a run's process: the repository root importable (``projects.paper``), wherever
    the comparison was started from."""
    root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""))


def run_all(
    specs: Iterable[RunSpec], results: Path, workers: int = 2, log=print, extra: Optional[Dict] = None
) -> Dict[str, Dict]:
    """Run the specs not yet in the runs file ``results`` through the study's run queue (:func:`.queue.run_queue`),
    ``workers`` at a time, each in a fresh process; return every spec's row (``extra`` is stored with new rows)."""
    specs = list(specs)
    done = load_results(results)
    todo = [s for s in specs if s.key() not in done]
    log(f"{len(specs) - len(todo)} of {len(specs)} runs already in {results}; {len(todo)} to run")
    finished = []

    def work(run: Run) -> dict:
        (spec,) = run.params
        proc = subprocess.run([sys.executable, "-c", "from projects.paper.runs.loop import child; child()"],
                              env=_child_env(), input=json.dumps(asdict(spec)), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RunFailed(f"its process exited with status {proc.returncode}:\n{proc.stderr[-3000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        return {**row, "spec": asdict(spec), **(extra or {})}

    def report(run: Run, row: dict) -> None:
        done[run.key] = row
        finished.append(run)
        log(f"[{len(finished)}/{len(todo)}] {run.name}: acc {row['acc']:.2f} (averaged {row['acc_avg']:.2f}), "
            f"{row['train_wall_s']:.0f} s")

    queue = [Run(f"{spec.dataset} {spec.system} seed {spec.seed}", spec.key(), (spec,)) for spec in todo]
    run_queue(RunsFile(results), queue, work, jobs=workers, report=report)
    return {s.key(): done[s.key()] for s in specs if s.key() in done}


def child() -> None:
    """Entry point of a run's process: a RunSpec as JSON on stdin, the result as JSON on stdout."""
    spec = RunSpec(**json.loads(sys.stdin.read()))
    print(json.dumps(train_and_score(spec)))


if __name__ == "__main__":
    child()
