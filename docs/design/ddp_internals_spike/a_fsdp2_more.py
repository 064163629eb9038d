"""(a) more: uneven shards (hidden=7), Adam, 3 steps, reshard_after_forward False, optimizer state size per rank, time per step."""
import time, torch, torch.distributed as dist
from common import launch, MLP

def body(rank, world):
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    torch.manual_seed(0); xs = [torch.randn(6, 5) for _ in range(3)]; ys = [torch.randn(6, 3) for _ in range(3)]
    torch.manual_seed(1); ref = MLP(5, 7, 3, blocks=3)
    torch.manual_seed(1); model = MLP(5, 7, 3, blocks=3)
    for i, b in enumerate(model.blocks):
        fully_shard(b, reshard_after_forward=(i % 2 == 0))
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ropt = torch.optim.Adam(ref.parameters(), lr=0.01)
    t = time.time()
    for x, y in zip(xs, ys):
        opt.zero_grad(); ((model(x.chunk(world)[rank]) - y.chunk(world)[rank]) ** 2).mean().backward(); opt.step()
        ropt.zero_grad(); ((ref(x) - y) ** 2).mean().backward(); ropt.step()
    dt = time.time() - t
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    err = max((full[n] - p).abs().max().item() for n, p in ref.named_parameters())
    local_state = sum(v.to_local().numel() for s in opt.state.values() for k, v in s.items() if k != "step")
    ref_state = sum(v.numel() for s in ropt.state.values() for k, v in s.items() if k != "step")
    print(f"[rank {rank}] 3 Adam steps, max |fsdp - ref| = {err:.2e}; local Adam state numel {local_state} of {ref_state}; local shapes {[tuple(p.to_local().shape) for p in model.parameters()][:2]}; {dt:.2f}s", flush=True)
    # mixed precision policy bf16 on CPU
    try:
        torch.manual_seed(1); m2 = MLP(5, 7, 3, blocks=2)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for b in m2.blocks: fully_shard(b, mp_policy=mp)
        fully_shard(m2, mp_policy=mp)
        out = m2(xs[0].chunk(world)[rank]); out.float().pow(2).mean().backward()
        print(f"[rank {rank}] bf16 MixedPrecisionPolicy ok, out dtype {out.dtype}", flush=True)
    except Exception as e:
        print(f"[rank {rank}] bf16 MixedPrecisionPolicy FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)

if __name__ == "__main__":
    launch(body)
