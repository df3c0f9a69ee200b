"""The paper study: Table 2 and everything measured around it (see projects/paper/README.md)."""
