__title__ = "spacy-nldm"
__version__ = "0.1.0"
