"""The rendezvous stores a runner hosts for its rank scenarios: torch's `TCPStore` servers (see
autograder.sandbox.rendezvous, whose `StoreHost` process serves them and caps what is read)."""

from __future__ import annotations

import datetime
import socket

import torch.distributed as dist


class TcpStores:
    """`StoreServer` with torch's TCPStore: a server on a listening socket made here, so it is
    in the network namespace of the process that calls `start` (the store host's)."""

    def start(self, host: str) -> tuple[int, object]:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        store = dist.TCPStore(host, port, None, True, datetime.timedelta(seconds=30),
                              wait_for_workers=False, master_listen_fd=listener.detach())
        return port, store

    def count(self, store: object) -> int:
        return int(store.num_keys())

    def keys(self, store: object) -> list[str]:
        return list(store.list_keys())
