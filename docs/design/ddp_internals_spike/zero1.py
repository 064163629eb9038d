"""(4) ZeRO-1 feasibility: Adam state for own shard only, all_reduce grads, step own shard, broadcast
each parameter from its owner. Compared with unsharded Adam over 3 steps; state numel per rank."""
import torch, torch.distributed as dist
from common import launch, MLP

class ZeRO1:
    def __init__(self, params, lr):
        self.params = list(params); r, w = dist.get_rank(), dist.get_world_size()
        # greedy partition by numel (largest first) -> owner per parameter
        load = [0] * w; self.owner = {}
        for p in sorted(self.params, key=lambda p: -p.numel()):
            o = load.index(min(load)); self.owner[p] = o; load[o] += p.numel()
        self.local = torch.optim.Adam([p for p in self.params if self.owner[p] == r], lr=lr)
    def zero_grad(self):
        for p in self.params: p.grad = None
    def step(self):
        w = dist.get_world_size()
        for p in self.params:
            p.grad.div_(w); dist.all_reduce(p.grad)
        self.local.step()
        for p in self.params:
            dist.broadcast(p.data, src=self.owner[p])

def body(rank, world):
    torch.manual_seed(0); data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]
    torch.manual_seed(1); m = MLP(4, 8, 1, blocks=3); opt = ZeRO1(m.parameters(), 0.01)
    torch.manual_seed(1); ref = MLP(4, 8, 1, blocks=3); ropt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for x, y in data:
        opt.zero_grad(); ((m(x.chunk(world)[rank]) - y.chunk(world)[rank]) ** 2).mean().backward(); opt.step()
        ropt.zero_grad(); ((ref(x) - y) ** 2).mean().backward(); ropt.step()
    err = max(float((a - b).abs().max()) for a, b in zip(m.parameters(), ref.parameters()))
    st = sum(v.numel() for s in opt.local.state.values() for k, v in s.items() if k != "step")
    full = sum(v.numel() for s in ropt.state.values() for k, v in s.items() if k != "step")
    print(f"[rank {rank}] max |zero1 - adam| = {err:.1e}; Adam state numel here {st} of {full} ({st/full:.2f})", flush=True)

if __name__ == "__main__":
    launch(body)
