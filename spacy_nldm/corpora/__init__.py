"""Readers and converters: CoNLL-U, ARK Twitter POS, Tweebank."""
