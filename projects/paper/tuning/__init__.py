"""Hyper-parameter search with Optuna over ``spacy train`` runs (``python -m projects.paper tune``).

Modules:

* :mod:`.space`: the search space (a YAML file, ``projects/paper/configs/tuned/space.yml``) and how a sampled point becomes
  ``spacy train`` config overrides;
* :mod:`.trial`: one trial = one ``spacy train`` subprocess, its dev scores read live from spaCy's progress table,
  killed when the pruner says so;
* :mod:`.study`: one resumable SQLite study per (dataset, system), the best config written as a full config;
* :mod:`.report`: the Markdown table of all studies (``projects/paper/results/tuning.md``).

Optuna is an optional dependency (``pip install -e ".[tune]"``): import this package only where it is needed.
"""
