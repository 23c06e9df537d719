"""The `kittiwake` command line: one click group (`main.py`), commands grouped by concept in sibling modules."""
