"""(a)+(d) FSDP2 with a trusted observer as rank 0: observer shards the reference way (each block, then
the root), trains one step on its half of the batch, then gathers the full state dict; rank 1 is the
student variant. The gathered dict on rank 0 (trusted) holds rank 1's shards as rank 1 computed them."""
import datetime, os, sys, time, json, socket
import torch, torch.distributed as dist
import torch.multiprocessing as mp
sys.path.insert(0, os.path.dirname(__file__))
from common import MLP

def entry(rank, variant, port, q):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=4))
    torch.manual_seed(0); x, y = torch.randn(8, 5), torch.randn(8, 3)
    torch.manual_seed(1); model = MLP(5, 7, 3, blocks=3)
    t0 = time.perf_counter(); err = None; sd = None
    try:
        if rank == 0 or variant == "per_block":
            for b in model.blocks: fully_shard(b)
            fully_shard(model)
        elif variant == "root_only":
            fully_shard(model)
        elif variant == "blocks_only_no_root":
            for b in model.blocks: fully_shard(b)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ((model(x.chunk(2)[rank]) - y.chunk(2)[rank]) ** 2).mean().backward(); opt.step()
        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    except Exception as e:
        err = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    if rank == 0:
        res = {"variant": variant, "error": err, "s": round(time.perf_counter() - t0, 2)}
        if sd:
            torch.manual_seed(1); ref = MLP(5, 7, 3, blocks=3); o = torch.optim.SGD(ref.parameters(), lr=0.1)
            ((ref(x) - y) ** 2).mean().backward(); o.step()
            res["full_sd_err_vs_full_batch"] = max(float((sd[k] - v).abs().max()) for k, v in ref.state_dict().items())
        q.put(res); q.close(); q.join_thread()
    os._exit(0)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for v in sys.argv[1:]:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        q = ctx.Queue(); ps = [ctx.Process(target=entry, args=(r, v, port, q)) for r in range(2)]
        t = time.time()
        for p in ps: p.start()
        try: res = q.get(timeout=25)
        except Exception: res = "no answer from rank 0"
        for p in ps:
            p.join(5)
            if p.is_alive(): p.kill(); p.join()
        print(f"== {v}: {json.dumps(res)} exit codes {[p.exitcode for p in ps]} wall {time.time()-t:.1f}s"); sys.stdout.flush()
