"""Readers and converters: CoNLL-U, ARK Twitter POS, synthetic data (``spacy_nldm.corpora.synthetic``)."""
