"""Rank scenarios meet at a store the grader hosts: a TCPStore asked to serve is its client.

The trusted side hosts each rank scenario's rendezvous store (autograder/sandbox/rendezvous.py)
and sets `TORCHELASTIC_USE_AGENT_STORE=True` in the ranks' environment, which
`init_process_group` honours (`tcp://`, `env://`). Code that builds its own store instead,
`dist.TCPStore(master_addr, master_port, world_size, is_master=rank == 0)`, is as right, but its
rank 0 would try to listen on the port the grader's store already holds. Under that variable,
as under torchrun's agent, the store at that port is the agent's: such a store becomes its
client. Installed before the student's module is imported; code that undoes it only fails its
own rendezvous.
"""

from __future__ import annotations

import datetime
import os
from typing import Any


def install() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    base = dist.TCPStore

    class TCPStore(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__

        def __init__(self, host_name: str, port: int, world_size: int | None = None,
                     is_master: bool = False,
                     timeout: datetime.timedelta = datetime.timedelta(seconds=300),
                     wait_for_workers: bool = True, multi_tenant: bool = False,
                     master_listen_fd: int | None = None, use_libuv: bool = True) -> None:
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and \
                    master_listen_fd is None:
                is_master = False
            super().__init__(host_name, port, world_size, is_master, timeout,
                             wait_for_workers, multi_tenant, master_listen_fd, use_libuv)

    TCPStore.__module__, TCPStore.__qualname__ = base.__module__, base.__qualname__
    for home in (dist, _c10d(dist)):
        if home is not None and getattr(home, "TCPStore", None) is base:
            home.TCPStore = TCPStore


def _c10d(dist: Any) -> Any:
    return getattr(dist, "distributed_c10d", None)
