"""Studies built on spacy-nldm, each in its own folder (``projects/<name>``); not part of the installed package."""
