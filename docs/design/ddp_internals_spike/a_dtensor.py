"""(a) DTensor-based equivalent: shard params by hand with distribute_tensor, gather with full_tensor / redistribute."""
import torch, torch.distributed as dist
from common import launch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import distribute_tensor, Shard, Replicate, DTensor

def body(rank, world):
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(3); w = torch.randn(7, 3)
    d = distribute_tensor(w, mesh, [Shard(0)])
    print(f"[rank {rank}] local {tuple(d.to_local().shape)} full equal {torch.equal(d.full_tensor(), w)} replicate equal {torch.equal(d.redistribute(mesh, [Replicate()]).to_local(), w)}", flush=True)
    # DTensor autograd: a sharded linear layer's grad is a DTensor shard
    p = torch.nn.Parameter(distribute_tensor(w.clone(), mesh, [Shard(0)]))
    x = torch.randn(4, 3)
    (torch.nn.functional.linear(x, p.full_tensor()).pow(2).sum()).backward()
    print(f"[rank {rank}] grad {type(p.grad).__name__} {p.grad.placements} local {tuple(p.grad.to_local().shape)}", flush=True)

if __name__ == "__main__":
    launch(body)
