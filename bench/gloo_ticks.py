"""What gloo's idle ticks cost a scenario, and what waking its loop threads saves: side by side.

    .venv/bin/python bench/gloo_ticks.py [--rounds 10] [--collectives 200]

Two processes make a gloo group (as a scenario's student rank and the grader's observer do),
then, ROUNDS times alternately plain and woken (autograder.sandbox_runtime.groups.woken): a
`new_group` beside the default group, a collective on it, and the teardown of both groups
(`destroy_process_group`, or `destroy_process_groups`). Prints the median milliseconds of each
and their ratio. Then COLLECTIVES small all_reduces one after another: their median and 90th
percentile, which show how often this machine leaves a collective waiting on a timer tick
(on the 2-core VM of docs/measuring.md: median 0.4-0.5 ms, 90th percentile 4 ms, one tick of
its kernel, in 30-40% of them; gloo's loop is not the cause, and waking it during them still
left 38 of 200 over 2 ms, against 59).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autograder.sandbox_runtime.groups import destroy_process_groups, woken  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, ports: list[int], rounds: int, collectives: int) -> dict:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {k: [] for k in ("new_group plain", "new_group woken",
                                                       "teardown plain", "teardown woken")}
    for i in range(rounds * 2):
        how = "woken" if i % 2 else "plain"
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[i]}", rank=rank,
                                world_size=2, timeout=datetime.timedelta(seconds=30))
        x = torch.ones(4)
        dist.all_reduce(x)  # (both ranks here: what follows starts side by side)
        started = time.perf_counter()
        with woken() if how == "woken" else contextlib.nullcontext():
            group = dist.new_group([0, 1])
        times[f"new_group {how}"].append(time.perf_counter() - started)
        dist.all_reduce(x, group=group)
        started = time.perf_counter()
        if how == "woken":
            destroy_process_groups()
        else:
            dist.destroy_process_group()
        times[f"teardown {how}"].append(time.perf_counter() - started)
        time.sleep(0.02)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[-1]}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    x = torch.ones(20)
    each = []
    for _ in range(collectives):
        started = time.perf_counter()
        dist.all_reduce(x)
        each.append(time.perf_counter() - started)
    destroy_process_groups()
    times["all_reduce"] = each
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--collectives", type=int, default=200)
    args = parser.parse_args()
    ports = [free_port() for _ in range(args.rounds * 2 + 1)]
    pid = os.fork()
    if pid == 0:
        try:
            rank_main(1, ports, args.rounds, args.collectives)
        finally:
            os._exit(0)
    times = rank_main(0, ports, args.rounds, args.collectives)
    os.waitpid(pid, 0)
    ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
    print(f"gloo, 2 processes, median of {args.rounds} rounds each (ms):")
    for what in ("new_group", "teardown"):
        plain, wake = ms[f"{what} plain"], ms[f"{what} woken"]
        print(f"  {what:10} plain {plain:6.1f}   woken {wake:6.1f}   ratio {plain / wake:5.1f}x")
    each = sorted(times["all_reduce"])
    p90 = 1000 * each[int(0.9 * len(each))]
    print(f"  {len(each)} small all_reduces: median {ms['all_reduce']:.2f}, 90th percentile "
          f"{p90:.2f}, over 2 ms: {sum(t > 0.002 for t in each)}")
    print(json.dumps({"median_ms": ms, "all_reduce_p90_ms": p90}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
