"""Lets `pytest` find your ddp_internals.py.

It looks next to these tests, then one folder up; set DDP_INTERNALS_DIR to point elsewhere.
"""

import os
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
_candidates = [os.environ.get("DDP_INTERNALS_DIR", ""), _here, _here.parent]
for _folder in _candidates:
    if _folder and (Path(_folder) / "ddp_internals.py").is_file():
        sys.path.insert(0, str(Path(_folder).resolve()))
        break
