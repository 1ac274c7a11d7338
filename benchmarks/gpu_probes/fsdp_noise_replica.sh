#!/bin/sh
# A standalone replica (torch only, < 2000 characters: it was sent inline to a GPU host where only the main
# checkout travels) of the suite's GPU FSDP run: FSDP_RUN["cuda"] (2 blocks of width 512, 32 fixed rows, 5 SGD
# steps lr 0.5 momentum 0.9, bf16 MixedPrecisionPolicy with fp32 reduce, blocks compiled), world 1, against the
# unsharded reference under bf16 autocast (A=1) or in fp32 (A=0); S scales the 2-D gradients before
# FSDP2's reduce-scatter (the grad_scale mutant). Prints per run: "S A seeds", seed, worst first-gradient gap,
# worst parameter-update gap, median parameter gap, loss drop. benchmarks/fsdp_noise.py is the real measurement.
cat >/tmp/r.py<<'P'
import torch,copy,os,torch.distributed as d
from torch.distributed.fsdp import fully_shard as F,MixedPrecisionPolicy as M
from torch.distributed.device_mesh import init_device_mesh as I
import torch.distributed.fsdp._fully_shard._fsdp_param_group as G
S,A,K=os.environ['C'].split();S=float(S);A=A=='1';R=G.foreach_reduce
def FR(p,g,*a,**k):
 [x.mul_(S) for x in g if x.ndim>1];return R(p,g,*a,**k)
G.foreach_reduce=FR
d.init_process_group('nccl','tcp://127.0.0.1:29511',rank=0,world_size=1)
n=torch.nn;D=512;f=n.functional;L=n.Linear
class B(n.Module):
 def __init__(s):super().__init__();s.n=n.LayerNorm(D);s.u=L(D,4*D);s.d=L(4*D,D)
 def forward(s,x):return x+s.d(f.gelu(s.u(s.n(x))))
mesh=I('cuda',(1,));mp=M(param_dtype=torch.bfloat16,reduce_dtype=torch.float32)
for e in range(int(K)):
 torch.manual_seed(e);m=n.Sequential(B(),B(),L(D,D)).cuda();r=copy.deepcopy(m);z=[p.detach().clone()for p in r.parameters()]
 for b in m[:2]:b.compile();F(b,mesh=mesh,mp_policy=mp)
 F(m,mesh=mesh,mp_policy=mp);g=torch.Generator().manual_seed(e+1);x=torch.randn(32,D,generator=g)
 y=torch.tanh(torch.mm(x,torch.randn(D,D,generator=g)/D**.5)).cuda();x=x.cuda()
 o=torch.optim.SGD(m.parameters(),lr=.5,momentum=.9);q=torch.optim.SGD(r.parameters(),lr=.5,momentum=.9);Z=[]
 for i in range(5):
  l=f.mse_loss(m(x).float(),y);l.backward()
  with torch.autocast('cuda',torch.bfloat16,enabled=A):k=f.mse_loss(r(x).float(),y)
  k.backward()
  if i==0:gg=[float((p.grad.full_tensor()-u.grad).norm()/u.grad.norm()) for p,u in zip(m.parameters(),r.parameters())]
  o.step();o.zero_grad();q.step();q.zero_grad();Z.append(float(l))
 pg=[float((p.full_tensor()-u).norm()/(u-w).norm()) for p,u,w in zip(m.parameters(),r.parameters(),z)]
 print(os.environ['C'],e,'%.5f %.5f %.5f %.3f'%(max(gg),max(pg),sorted(pg)[7],1-Z[-1]/Z[0]))
P
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for c in "1 1 5" "1 0 3" ".5 1 2" "0 1 1" "2 1 1";do C="$c" python3 /tmp/r.py;done
