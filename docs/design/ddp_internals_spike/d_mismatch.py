"""(d) What gloo does when two ranks post mismatched collectives (timeout=5 s in init_process_group).
Each case: rank 0 and rank 1 post the given op; report result or exception and time to it."""
import datetime, os, socket, sys, time, traceback
import torch, torch.distributed as dist
import torch.multiprocessing as mp

F32, BF16, F64 = torch.float32, torch.bfloat16, torch.float64
def ar(n, dt=F32, op=dist.ReduceOp.SUM): return ("all_reduce", n, dt, op)
def bc(n, dt=F32, src=0): return ("broadcast", n, dt, src)
def ag(n, dt=F32): return ("all_gather", n, dt, None)
CASES = {
    "same":            (ar(6), ar(6)),
    "numel 6 vs 4":    (ar(6), ar(4)),
    "numel 4 vs 6":    (ar(4), ar(6)),
    "numel 1000 vs 10":(ar(1000), ar(10)),
    "f32 vs bf16 (same numel)": (ar(6), ar(6, BF16)),
    "f32 n=6 vs bf16 n=12 (same bytes)": (ar(6), ar(12, BF16)),
    "f32 vs f64 (same numel)": (ar(6), ar(6, F64)),
    "SUM vs MAX": (ar(6), ar(6, op=dist.ReduceOp.MAX)),
    "broadcast vs all_reduce": (bc(6), ar(6)),
    "all_gather vs all_reduce": (ag(6), ar(6)),
    "all_reduce vs nothing (peer idle)": (ar(6), None),
    "bf16 all_reduce both": (ar(6, BF16), ar(6, BF16)),
    "f32 vs int32 (same numel, same bytes/elt)": (ar(6), ar(6, torch.int32)),
    "f16 vs bf16 (same numel)": (ar(6, torch.float16), ar(6, BF16)),
    "broadcast src=1 vs all_reduce": (bc(6, src=1), ar(6)),
    "broadcast 6 vs broadcast 4": (bc(6), bc(4)),
    "broadcast 4 vs broadcast 6": (bc(4), bc(6)),
    "broadcast src=0 vs src=1 (both send)": (bc(6, src=0), bc(6, src=1)),
    "broadcast src=1 vs src=0 (both receive)": (bc(6, src=1), bc(6, src=0)),
    "AVG both": (ar(6, op=dist.ReduceOp.AVG), ar(6, op=dist.ReduceOp.AVG)),
}

def run(rank, world, port, spec, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=5))
    dist.barrier()
    t = time.perf_counter()
    try:
        if spec is None:
            time.sleep(8); out = "idle"
        else:
            kind, n, dt, extra = spec
            x = (torch.arange(n, dtype=torch.float64) + 1 + 100 * rank).to(dt)
            if kind == "all_reduce": dist.all_reduce(x, op=extra); out = x.tolist()
            elif kind == "broadcast": dist.broadcast(x, src=extra); out = x.tolist()
            else:
                outs = [torch.empty_like(x) for _ in range(world)]; dist.all_gather(outs, x); out = [o.tolist() for o in outs]
        q.put((rank, f"ok {time.perf_counter()-t:.2f}s -> {str(out)[:90]}"))
    except Exception as e:
        q.put((rank, f"{type(e).__name__} after {time.perf_counter()-t:.2f}s: {' '.join(str(e).split())[:260]}"))
    q.close(); q.join_thread()
    os._exit(0)  # skip destroy: a broken group may hang in teardown

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    only = sys.argv[1:] or list(CASES)
    for name in only:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        q = ctx.Queue(); ps = [ctx.Process(target=run, args=(r, 2, port, CASES[name][r], q)) for r in range(2)]
        for p in ps: p.start()
        t = time.time(); res = {}
        while len(res) < 2 and time.time() - t < 14 and any(p.is_alive() for p in ps) or (len(res) < 2 and not q.empty()):
            try: r, m = q.get(timeout=1); res[r] = m
            except Exception: pass
        for p in ps:
            p.join(2)
            if p.is_alive(): p.kill(); p.join()
        print(f"== {name}")
        for r in range(2): print(f"   rank {r}: {res.get(r, 'NO ANSWER (killed at 14 s or crashed)')}  [exit {ps[r].exitcode}]")
        sys.stdout.flush()
