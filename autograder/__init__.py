"""Sandboxed autograder for the PyTorch multi-GPU unit."""

import sys

__version__ = "0.1.0"

# jsonschema registers every format checker it can import when it is imported, and
# rfc3987_syntax (installed with Jupyter's jsonschema[format-nongpl]) builds a grammar for 2 s
# as it loads: our schemas check `date-time` only, so no process of ours loads it (None in
# sys.modules: its import fails, and jsonschema goes without the `iri` checker).
sys.modules.setdefault("rfc3987_syntax", None)
