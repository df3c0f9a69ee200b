"""The study's run harnesses and their one run record:

* :mod:`.records`: the runs file every harness keeps its runs in (JSON lines, one row a finished run with its
  ``key``; appended under a file lock; a lock file per run being trained);
* :mod:`.queue`: the one run queue of every harness (resumable, several runs at a time, a fingerprint of each
  run's config and budget in its row, lock files so that several processes share it) and the one way to run ``spacy train`` and ``spacy evaluate
  --gold-preproc`` (Table 2: ``projects.paper.scripts.reproduce``; Figure 3: ``projects.paper.scripts.synthetic_runs``);
* :mod:`.seeds`: systems x seeds of one config pattern through that queue, and their mean ± std tables
  (``python -m projects.paper seed-runs`` / ``seed-table`` / ``arc-length``: GloVe, MiniLM, Figure 4);
* :mod:`.spacy_train`: ``python -m projects.paper spacy-train``, the configs ``spacy init config`` writes,
  trained with the queue's two commands, its runs keyed by the config's settings;
* :mod:`.loop`: the plain ``nlp.update`` loop a new user writes
  (``python -m projects.paper accuracy``, ``projects.paper.scripts.diagnose_accuracy``).

The search's trials (:mod:`projects.paper.tuning.trial`) read ``spacy train``'s dev scores live to prune them.
"""
