"""(c) bf16 compression comm hooks on DDP, gloo, CPU. Rank 0 = observer running DDP with a trusted
recording hook (contributes its own bf16 gradient/world, infers what rank 1 sent); rank 1 = variant hook.
Also: training result vs single-process full batch (3 SGD steps)."""
import datetime, os, sys, time, json, socket
import torch, torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

WORLD = 2
def make(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))
def data(seed, steps=3, n=8):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 4, generator=g), torch.randn(n, 2, generator=g)) for _ in range(steps)]

def my_bf16_hook(state, bucket):
    buf = bucket.buffer()
    c = buf.to(torch.bfloat16).div_(dist.get_world_size())
    fut = dist.all_reduce(c, async_op=True).get_future()
    def decompress(f):
        return buf.copy_(f.value()[0])
    return fut.then(decompress)
def fp16_hook(state, bucket):   # mutant: wrong 16-bit type (same bytes)
    return default_hooks.fp16_compress_hook(state, bucket)
def no_div_hook(state, bucket):  # mutant: forgets to divide
    buf = bucket.buffer(); c = buf.to(torch.bfloat16)
    return dist.all_reduce(c, async_op=True).get_future().then(lambda f: buf.copy_(f.value()[0]))
def torch_bf16_wrapped(state, bucket):   # same hook under another __name__ (DDP's CPU refusal is by name)
    return default_hooks.bf16_compress_hook(state, bucket)
HOOKS = {"torch_bf16_wrapped": torch_bf16_wrapped, "torch_bf16": default_hooks.bf16_compress_hook, "mine_bf16": my_bf16_hook, "fp16": fp16_hook,
         "no_div": no_div_hook, "none": None}

def entry(rank, variant, port, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=4))
    model = make(1 + rank)          # rank 1 starts elsewhere: DDP's broadcast from rank 0 must fix it
    ddp = DDP(model, bucket_cap_mb=0.0008)     # ~800 bytes: several buckets for this model
    log = []
    expected_local = {}
    if rank == 0:
        def obs_hook(state, bucket):
            buf = bucket.buffer()
            own = buf.to(torch.bfloat16).div_(WORLD)
            res = own.clone()
            t = time.perf_counter()
            dist.all_reduce(res)
            log.append({"bucket": bucket.index(), "numel": res.numel(), "sent": (res.float() - own.float())})
            fut = torch.futures.Future(); fut.set_result(buf.copy_(res)); return fut
        ddp.register_comm_hook(None, obs_hook)
    elif HOOKS[variant] is not None:
        ddp.register_comm_hook(None, HOOKS[variant])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref = make(1); ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    t0 = time.perf_counter(); err = None
    try:
        for step, (x, y) in enumerate(data(5)):
            if rank == 0:   # what rank 1 should send this step: bf16(grad of its shard of the current reference model)/2
                ref_copy = make(1); ref_copy.load_state_dict(ddp.module.state_dict())
                ((ref_copy(x.chunk(WORLD)[1]) - y.chunk(WORLD)[1]) ** 2).mean().backward()
                expected_local[step] = {n: p.grad.to(torch.bfloat16).div_(WORLD).float() for n, p in ref_copy.named_parameters()}
                nlog = len(log)
            opt.zero_grad(); ((ddp(x.chunk(WORLD)[rank]) - y.chunk(WORLD)[rank]) ** 2).mean().backward(); opt.step()
            ropt.zero_grad(); ((ref(x) - y) ** 2).mean().backward(); ropt.step()
            if rank == 0:
                # buckets hold params in reverse order; flatten the expectation the same way per bucket is DDP-internal,
                # so compare as multisets of values per step (sorted) for this spike
                sent = torch.cat([r["sent"] for r in log[nlog:]]).sort().values
                exp = torch.cat([v.flatten() for v in expected_local[step].values()]).sort().values
                log[-1]["step_err"] = float((sent - exp).abs().max()) if sent.numel() == exp.numel() else f"numel {sent.numel()} vs {exp.numel()}"
    except Exception as e:
        err = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    res = {"rank": rank, "variant": variant, "error": err, "s": round(time.perf_counter() - t0, 2)}
    if err is None:
        res["max_param_err_vs_full_batch"] = max(float((a.detach() - b.detach()).abs().max()) for a, b in zip(ddp.module.parameters(), ref.parameters()))
    if rank == 0:
        res["buckets_per_step"] = [r["numel"] for r in log][: len(log) // 3 if log else 0]
        res["sent_vs_expected_bf16_per_step"] = [r["step_err"] for r in log if "step_err" in r]
    q.put(res); q.close(); q.join_thread(); os._exit(0)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for v in sys.argv[1:]:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        q = ctx.Queue(); ps = [ctx.Process(target=entry, args=(r, v, port, q)) for r in range(2)]
        for p in ps: p.start()
        out = {}
        t = time.time()
        while len(out) < 2 and time.time() - t < 25:
            try: r = q.get(timeout=1); out[r["rank"]] = r
            except Exception:
                if not any(p.is_alive() for p in ps) and q.empty(): break
        for p in ps:
            p.join(3)
            if p.is_alive(): p.kill(); p.join()
        print(f"== {v}")
        for r in range(2): print("  ", json.dumps(out.get(r, f"rank {r}: no answer, exit code {ps[r].exitcode}")))
        sys.stdout.flush()
