"""Soak run of the input-layer fuzzing (tests/test_fuzz_inputs.py) at many times its size.

    .venv/bin/python scripts/fuzz_inputs.py                 # 80x: about 52,000 cases
    .venv/bin/python scripts/fuzz_inputs.py --scale 400 --seed 7

The same properties as in `make test` (every answers file, zip, folder and notebook ends in a
result or a specific problem, folders in a valid inert report), with FUZZ_SCALE times the cases;
a failure prints Hypothesis's minimal example and how to reproduce it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=80.0,
                        help="multiple of the test's case counts (default 80)")
    parser.add_argument("--seed", type=int, help="Hypothesis seed, to repeat a run")
    parser.add_argument("-k", help="only the properties matching this pytest expression")
    args = parser.parse_args()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               str(ROOT / "tests" / "test_fuzz_inputs.py"), "--hypothesis-show-statistics"]
    if args.seed is not None:
        command.append(f"--hypothesis-seed={args.seed}")
    if args.k:
        command += ["-k", args.k]
    started = time.monotonic()
    code = subprocess.call(command, cwd=ROOT, env={**os.environ, "FUZZ_SCALE": str(args.scale)})
    print(f"fuzz_inputs: scale {args.scale:g}, {time.monotonic() - started:.0f} s, "
          f"{'OK' if code == 0 else 'FAILED'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
