"""(d) When the observer gives up and exits, how soon does a student rank blocked in a collective
(its own PG timeout 60 s) find out? Observer: PG timeout 3 s, posts a broadcast where the student posts
an all_reduce (an op mismatch gloo cannot detect), then exits (os._exit) or aborts (SIGABRT)."""
import datetime, os, signal, sys, time, socket
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def entry(rank, port, how, q):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=3 if rank == 0 else 60))
    dist.barrier(); t = time.perf_counter()
    if rank == 0:
        try: dist.broadcast(torch.zeros(4), src=0)
        except Exception as e: q.put(f"observer: {type(e).__name__} after {time.perf_counter()-t:.2f}s")
        q.close(); q.join_thread()
        if how == "abort": os.kill(os.getpid(), signal.SIGABRT)
        os._exit(0)
    try: dist.all_reduce(torch.zeros(4)); q.put("student: completed?!")
    except Exception as e: q.put(f"student: {type(e).__name__} after {time.perf_counter()-t:.2f}s: {' '.join(str(e).split())[:110]}")
    q.close(); q.join_thread(); os._exit(0)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for how in ("exit", "abort"):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        q = ctx.Queue(); ps = [ctx.Process(target=entry, args=(r, port, how, q)) for r in range(2)]
        for p in ps: p.start()
        out = []
        for _ in range(2):
            try: out.append(q.get(timeout=30))
            except Exception: out.append("no answer in 30 s")
        for p in ps:
            p.join(3)
            if p.is_alive(): p.kill(); p.join()
        print(f"== observer {how}s: {out} exit codes {[p.exitcode for p in ps]}"); sys.stdout.flush()
