"""Lets `pytest` find your dp_basics.py.

It looks next to these tests, then one folder up; set DP_BASICS_DIR to point elsewhere.
"""

import os
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
_candidates = [os.environ.get("DP_BASICS_DIR", ""), _here, _here.parent]
for _folder in _candidates:
    if _folder and (Path(_folder) / "dp_basics.py").is_file():
        sys.path.insert(0, str(Path(_folder).resolve()))
        break
