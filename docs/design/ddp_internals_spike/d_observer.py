"""(d) A trusted observer rank with gates in backward.

Rank 0 = observer (trusted: never runs student code). Rank 1 = "student" variant.
The model (built by the probe in the student's process) has two gates: autograd Functions whose
backward needs a drawn value s_k that the observer broadcasts on a second group (gate_pg):
  gate1 sits just below the head, gate2 below the last block.
Observer protocol per step:
  thread B: serve gate1 at once; serve gate2 only after the head's all_reduces completed.
  thread A: post the head's all_reduces only AFTER gate1 was served (so a rank that blocks inside
            its hook never reaches gate1: deadlock), then the rest in hook order.
The gate's backward is nonlinear in the upstream gradient (g*s0 + s1*g*g), so gradients below a
gate cannot be finished before its value arrives.
The observer contributes its own shard's gradient/world and infers what the student sent:
  sent = result - own. It records (index, numel, dtype, t_done) and the value error vs reference.
"""
import datetime, os, sys, threading, time, json
import torch, torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

OBS, STU, WORLD = 0, 1, 2
TIMEOUT = float(os.environ.get("OBS_TIMEOUT", "4"))

class Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k, server):
        ctx.k, ctx.server = k, server
        return x.view_as(x)
    @staticmethod
    def backward(ctx, g):
        s = ctx.server(ctx.k)                     # blocks until the observer releases s_k
        return g * s[0] + s[1] * g * g, None, None

class GatedMLP(nn.Module):
    def __init__(self, d=4, h=6, o=2, blocks=3, server=None):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(d if i == 0 else h, h) for i in range(blocks)])
        self.head = nn.Linear(h, o)
        self.server = server
    def forward(self, x):
        n = len(self.blocks)
        for i, b in enumerate(self.blocks):
            if i == n - 1: x = Gate.apply(x, 2, self.server)
            x = torch.tanh(b(x))
        x = Gate.apply(x, 1, self.server)
        return self.head(x)

def data(seed, steps, n=8):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 4, generator=g), torch.randn(n, 2, generator=g)) for _ in range(steps)]

# ------------------------------------------------------------------ student variants (rank 1)
class Overlapped:
    sync_in_hook = False
    def __init__(self, model):
        self.model, self.handles = model, []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)
    def _hook(self, p):
        p.grad.div_(dist.get_world_size())
        if self.sync_in_hook: dist.all_reduce(p.grad)
        else: self.handles.append(dist.all_reduce(p.grad, async_op=True))
    def finish(self):
        for h in self.handles: h.wait()
        self.handles.clear()

class SyncInHook(Overlapped): sync_in_hook = True
class NoWait(Overlapped):
    def finish(self): self.handles.clear()
class Naive:
    def __init__(self, model): self.model = model
    def finish(self):
        for p in self.model.parameters():   # after backward, parameters() order
            p.grad.div_(dist.get_world_size()); dist.all_reduce(p.grad)
class NaiveReverse(Naive):
    def finish(self):
        for p in reversed(list(self.model.parameters())):   # ready order, but after backward
            p.grad.div_(dist.get_world_size()); dist.all_reduce(p.grad)

VARIANTS = {"overlapped": Overlapped, "sync_in_hook": SyncInHook, "no_wait": NoWait,
            "naive": Naive, "naive_reverse": NaiveReverse}

def student(variant, seed, steps, lr, gate_pg):
    def server(k):
        s = torch.zeros(2); dist.broadcast(s, src=OBS, group=gate_pg); return s
    torch.manual_seed(seed); model = GatedMLP(server=server)
    ddp = VARIANTS[variant](model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in data(seed, steps):
        opt.zero_grad()
        xs, ys = x.chunk(WORLD)[STU], y.chunk(WORLD)[STU]
        ((model(xs) - ys) ** 2).mean().backward()
        ddp.finish(); opt.step()
    final = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.send(final, dst=OBS)      # the probe hands the final parameters to the observer

# ------------------------------------------------------------------ observer (rank 0), trusted
def observer(variant, seed, steps, lr, gate_pg, delay_last):
    rng = torch.Generator().manual_seed(seed + 99)        # the gate values: drawn per grading
    torch.manual_seed(seed); model = GatedMLP(server=None)
    names = {p: n for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    log, failure, steptimes = [], None, []
    for step, (x, y) in enumerate(data(seed, steps)):
        svals = {k: torch.tensor([1 + torch.rand(1, generator=rng).item(), 0.5 * torch.rand(1, generator=rng).item()]) for k in (1, 2)}
        model.server = lambda k: svals[k]
        # own shards' gradients (observer's and, for checking, the student's), and hook order
        def grads(part):
            order = []
            hs = [p.register_post_accumulate_grad_hook(lambda p: order.append(p)) for p in model.parameters()]
            opt.zero_grad(); ((model(x.chunk(WORLD)[part]) - y.chunk(WORLD)[part]) ** 2).mean().backward()
            for h in hs: h.remove()
            return order, {p: p.grad.detach().clone() / WORLD for p in model.parameters()}
        order, stu = grads(STU)
        _, own = grads(OBS)
        above_gate2 = [p for p in order if names[p].startswith("head")]
        e1, e2, errs = threading.Event(), threading.Event(), []
        def thread_b():
            try:
                dist.broadcast(svals[1].clone(), src=OBS, group=gate_pg); e1.set()
                if not e2.wait(TIMEOUT): raise RuntimeError("head gradients never arrived before gate2")
                dist.broadcast(svals[2].clone(), src=OBS, group=gate_pg)
            except Exception as e: errs.append(f"gate thread: {type(e).__name__}: {str(e)[:120]}"); e1.set(); e2.set()
        tb = threading.Thread(target=thread_b); tb.start()
        t0 = time.perf_counter()
        if not e1.wait(TIMEOUT + 1): errs.append("student never reached gate1")
        for i, p in enumerate(order):
            if errs: break
            if i == len(order) - 1 and delay_last: time.sleep(delay_last)
            buf = own[p].clone()
            try:
                dist.all_reduce(buf)
            except Exception as e:
                errs.append(f"all_reduce #{i} ({names[p]}): {type(e).__name__}: {str(e)[:120]}"); e2.set(); break
            sent = buf - own[p]
            log.append({"step": step, "i": i, "param": names[p], "numel": buf.numel(), "dtype": str(buf.dtype).replace("torch.", ""),
                        "t_ms": round(1000 * (time.perf_counter() - t0), 1),
                        "sent_err": float((sent - stu[p]).abs().max())})
            p.grad = buf
            if p is above_gate2[-1]: e2.set()
        tb.join(TIMEOUT + 2)
        steptimes.append(round(time.perf_counter() - t0, 3))
        if errs: failure = f"step {step}: " + "; ".join(errs); break
        opt.step()
    result = {"variant": variant, "failure": failure, "collectives": len(log), "step_s": steptimes}
    if failure is None:
        final = torch.cat([p.detach().flatten() for p in model.parameters()])
        got = torch.empty_like(final); dist.recv(got, src=STU)
        result["final_err_vs_reference"] = float((got - final).abs().max())
        result["max_sent_err"] = max(r["sent_err"] for r in log)
        result["step0"] = [(r["param"], r["numel"], r["t_ms"]) for r in log if r["step"] == 0]
    return result

def entry(rank, variant, port, q, delay_last):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    gate_pg = dist.new_group([0, 1])
    t = time.perf_counter()
    try:
        if rank == OBS:
            r = observer(variant, 7, 3, 0.1, gate_pg, delay_last); r["observer_s"] = round(time.perf_counter() - t, 2); q.put(r)
        else:
            student(variant, 7, 3, 0.1, gate_pg)
    except Exception as e:
        if rank == OBS: q.put({"variant": variant, "failure": f"observer raised {type(e).__name__}: {str(e)[:150]}", "observer_s": round(time.perf_counter() - t, 2)})
    if rank == OBS: q.close(); q.join_thread()
    os._exit(0)

if __name__ == "__main__":
    import socket
    ctx = mp.get_context("spawn")
    for v in sys.argv[1:]:
        delay = 0.0
        if ":" in v: v, delay = v.split(":")[0], float(v.split(":")[1])
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        q = ctx.Queue(); ps = [ctx.Process(target=entry, args=(r, v, port, q, delay)) for r in range(2)]
        t = time.time()
        for p in ps: p.start()
        try: res = q.get(timeout=30)
        except Exception: res = {"variant": v, "failure": "observer gave no answer in 30 s"}
        for p in ps:
            p.join(5)
            if p.is_alive(): p.kill(); p.join()
        res["wall_s"] = round(time.time() - t, 1); res["delay_last"] = delay
        print(json.dumps(res)); sys.stdout.flush()
