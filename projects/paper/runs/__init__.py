"""The study's run harnesses, one module each:

* :mod:`.queue`: a resumable queue of ``spacy train`` + ``spacy evaluate --gold-preproc`` runs, one JSON record
  per run with a fingerprint of its config and budget, lock files so that several processes share the queue
  (Table 2: ``projects.paper.scripts.reproduce``; Figure 3: ``projects.paper.scripts.synthetic_runs``);
* :mod:`.seeds`: systems x seeds of one config pattern with ``spacy train`` + ``spacy evaluate``, and their
  mean ± std tables (``python -m projects.paper seed-runs`` / ``seed-table`` / ``arc-length``: GloVe, MiniLM,
  Figure 4);
* :mod:`.loop`: the plain ``nlp.update`` loop a new user writes, runs kept in a JSON-lines file
  (``python -m projects.paper accuracy``, ``projects.paper.scripts.diagnose_accuracy``).
"""
