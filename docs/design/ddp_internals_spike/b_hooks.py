"""(b) register_post_accumulate_grad_hook: order of firing during backward; async all_reduce launched from inside;
wait before step; equality with single-process full-batch training (3 SGD steps, momentum)."""
import time, torch, torch.distributed as dist
from common import launch, MLP

class Overlapped(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module, self.handles, self.log = module, [], []
        for p in module.parameters():  # broadcast initial params from rank 0
            dist.broadcast(p.data, 0)
        names = {p: n for n, p in module.named_parameters()}
        for p in module.parameters():
            p.register_post_accumulate_grad_hook(self._hook(names[p]))
    def _hook(self, name):
        def hook(p):
            self.log.append((name, time.perf_counter()))
            p.grad.div_(dist.get_world_size())
            self.handles.append(dist.all_reduce(p.grad, async_op=True))
        return hook
    def forward(self, *a):
        return self.module(*a)
    def finish(self):
        for h in self.handles: h.wait()
        self.handles.clear()

def body(rank, world):
    torch.manual_seed(0); xs = [torch.randn(8, 4) for _ in range(3)]; ys = [torch.randn(8, 1) for _ in range(3)]
    torch.manual_seed(1 + rank)  # different init per rank: broadcast must fix it
    model = Overlapped(MLP(4, 8, 1, blocks=3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step, (x, y) in enumerate(zip(xs, ys)):
        model.log.clear(); opt.zero_grad()
        loss = ((model(x.chunk(world)[rank]) - y.chunk(world)[rank]) ** 2).mean()
        t0 = time.perf_counter(); loss.backward(); t1 = time.perf_counter()
        n_pending = sum(not h.is_completed() for h in model.handles)
        model.finish(); opt.step()
        if step == 0:
            print(f"[rank {rank}] hook order: {[n for n, _ in model.log]}", flush=True)
            print(f"[rank {rank}] hooks fired within backward: {all(t0 <= t <= t1 for _, t in model.log)}; handles {len(model.handles) or len(model.log)}; pending at backward end {n_pending}", flush=True)
    torch.manual_seed(1); ref = MLP(4, 8, 1, blocks=3); ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for x, y in zip(xs, ys):
        ropt.zero_grad(); ((ref(x) - y) ** 2).mean().backward(); ropt.step()
    err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    print(f"[rank {rank}] after 3 steps max |overlapped - full batch| = {err:.2e}", flush=True)
    # does the hook fire on accumulation (no_grad-free second backward) each time? and with a shared (tied) parameter?
    lin = torch.nn.Linear(3, 3); fires = []
    lin.weight.register_post_accumulate_grad_hook(lambda p: fires.append(1))
    x = torch.randn(2, 3); (lin(lin(x)).sum()).backward()
    print(f"[rank {rank}] tied use twice in one graph -> hook fired {len(fires)} time(s)", flush=True)

if __name__ == "__main__":
    launch(body)
