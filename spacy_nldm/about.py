__title__ = "spacy-nldm"
__version__ = "0.2.0"
