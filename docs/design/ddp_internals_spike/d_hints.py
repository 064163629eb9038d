"""(d)(ii) An observer that does not know sizes in advance: the probe (in the student's process) wraps
dist.all_reduce so that each call first announces (seq, numel, dtype) in the grader's TCPStore; the
observer reads the announcement, posts an all_reduce of that size with zeros (so the result is exactly
what the student sent) and records it. Announcements are only hints: a lie is a size mismatch."""
import datetime, os, sys, time, json, socket
import torch, torch.distributed as dist
import torch.multiprocessing as mp

OBS, STU = 0, 1
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}

def student(variant, store):
    seq = [0]
    real = dist.all_reduce
    def announced(t, *a, **k):           # the probe's wrapper (student code can bypass it)
        numel = t.numel() if variant != "lie" else t.numel() - 2
        store.set(f"hint/{seq[0]}", json.dumps({"op": "all_reduce", "numel": numel, "dtype": str(t.dtype)[6:]}))
        seq[0] += 1
        return real(t, *a, **k)
    dist.all_reduce = announced
    g = torch.Generator().manual_seed(3)
    sizes = [5, 17, 3] if variant != "bucketed" else [25]
    for n in sizes:
        t = torch.randn(n, generator=g)
        if variant == "bypass":
            dist.group.WORLD.allreduce([t]).wait()       # straight to the ProcessGroup: no hint
        else:
            dist.all_reduce(t)
    store.set("hint/done", "1")

def observer(store, q):
    seen, t0 = [], time.perf_counter()
    try:
        for i in range(10):
            deadline = time.time() + 3           # the next hint, or the end of the scenario
            while not store.check([f"hint/{i}"]) and not store.check(["hint/done"]):
                if time.time() > deadline: raise TimeoutError(f"no hint/{i} and no hint/done within 3 s")
                time.sleep(0.002)
            if not store.check([f"hint/{i}"]): break
            h = json.loads(store.get(f"hint/{i}"))
            buf = torch.zeros(h["numel"], dtype=DT[h["dtype"]])
            dist.all_reduce(buf)
            seen.append({"i": i, "numel": h["numel"], "dtype": h["dtype"], "sum_sent": round(float(buf.sum()), 4), "t_ms": round(1000 * (time.perf_counter() - t0), 1)})
        q.put({"seen": seen, "error": None})
    except Exception as e:
        q.put({"seen": seen, "error": f"{type(e).__name__} after {time.perf_counter()-t0:.1f}s: {' '.join(str(e).split())[:150]}"})

def entry(rank, variant, port, q):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2 + 1, False, timeout=datetime.timedelta(seconds=5))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=4))
    try:
        if rank == OBS: observer(store, q)
        else: student(variant, store)
    except Exception as e:
        if rank == OBS: q.put({"error": f"observer: {type(e).__name__}: {str(e)[:120]}"})
    if rank == OBS: q.close(); q.join_thread()
    os._exit(0)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for v in sys.argv[1:]:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        server = dist.TCPStore("127.0.0.1", port, 3, True, wait_for_workers=False)   # the grader's store
        q = ctx.Queue(); ps = [ctx.Process(target=entry, args=(r, v, port, q)) for r in range(2)]
        t = time.time()
        for p in ps: p.start()
        try: res = q.get(timeout=20)
        except Exception: res = "no answer from observer"
        for p in ps:
            p.join(5)
            if p.is_alive(): p.kill(); p.join()
        print(f"== {v}: {json.dumps(res)} exit codes {[p.exitcode for p in ps]} wall {time.time()-t:.1f}s"); sys.stdout.flush()
        del server
