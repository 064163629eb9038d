"""(a) FSDP2 fully_shard on CPU/gloo: one training step equals full-batch single-process; full state dict on rank 0."""
import copy, torch, torch.distributed as dist
from common import launch, MLP

def ref(seed, x, y, lr):
    torch.manual_seed(seed); m = MLP()
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    ((m(x) - y) ** 2).mean().backward(); opt.step()
    return m.state_dict()

def body(rank, world):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    torch.manual_seed(0); x = torch.randn(8, 4); y = torch.randn(8, 1)
    torch.manual_seed(1); model = MLP()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    p0 = next(model.parameters())
    print(f"[rank {rank}] param type {type(p0).__name__} placements {p0.placements} local {tuple(p0.to_local().shape)} global {tuple(p0.shape)} device_mesh {p0.device_mesh}", flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
    loss = ((model(xs) - ys) ** 2).mean(); loss.backward(); opt.step()
    print(f"[rank {rank}] grad type {type(p0.grad).__name__} step ok", flush=True)
    # 1. DTensor.full_tensor
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    # 2. get_model_state_dict
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions
    try:
        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        print(f"[rank {rank}] get_model_state_dict: {len(sd)} keys, types {sorted({type(v).__name__ for v in sd.values()})}", flush=True)
    except Exception as e:
        sd = None; print(f"[rank {rank}] get_model_state_dict FAILED: {type(e).__name__}: {e}", flush=True)
    if rank == 0:
        r = ref(1, x, y, 0.1)
        ok_full = all(torch.allclose(full[k], r[k], atol=1e-6) for k in r)
        print(f"[rank 0] full_tensor equals single-process full-batch step: {ok_full}", flush=True)
        if sd is not None:
            ok_sd = all(torch.allclose(sd[k], r[k], atol=1e-6) for k in r)
            print(f"[rank 0] get_model_state_dict equals reference: {ok_sd}", flush=True)
    else:
        print(f"[rank 1] sd on rank 1 has {0 if sd is None else len(sd)} keys", flush=True)
    # 3. reshard-after-forward all-gathers: count collectives per forward via a debug hook? use torch's comm debug
    from torch.distributed.fsdp import FSDPModule
    print(f"[rank {rank}] isinstance FSDPModule: {isinstance(model, FSDPModule)}, blocks: {[isinstance(b, FSDPModule) for b in model.blocks]}", flush=True)

if __name__ == "__main__":
    launch(body)
