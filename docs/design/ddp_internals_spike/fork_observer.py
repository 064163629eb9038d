"""Cost of an observer forked from a torch-warm trusted parent (no gloo threads in the parent)."""
import os, time, datetime, socket, resource
import torch, torch.distributed as dist
def child(port, rank):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=5))
    t = torch.ones(3); dist.all_reduce(t); assert t[0] == 2; dist.destroy_process_group(); os._exit(0)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
t = time.time(); r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
pids = []
for rank in range(2):
    pid = os.fork()
    if pid == 0: child(port, rank)
    pids.append(pid)
codes = [os.waitpid(p, 0)[1] for p in pids]
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"two forked ranks met and all_reduced: wait statuses {codes}, wall {time.time()-t:.2f}s, children CPU {r1.ru_utime+r1.ru_stime-r0.ru_utime-r0.ru_stime:.2f}s")
