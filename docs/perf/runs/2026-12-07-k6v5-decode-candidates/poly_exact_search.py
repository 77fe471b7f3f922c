import numpy as np, itertools, sys
from tq_core import codebooks as cb
def r16(x): return np.asarray(x,dtype=np.float32).astype(np.float16).astype(np.float32)
bits=int(sys.argv[1]); deg=int(sys.argv[2]); n=1<<bits; half=n//2
lm=np.array(cb.lloyd_max(bits).centroids)
s=1.0/half  # t = (c - (n-1)/2)/half
t=((np.arange(half,n)-(n-1)/2)*s).astype(np.float32)
assert np.all(r16(t)==t)
K=(deg+1)//2
V=np.stack([t.astype(np.float64)**(2*i+1) for i in range(K)],1)
real=np.linalg.lstsq(V,lm[half:],rcond=None)[0]
print("real coef",real)
def evals(coef):  # coef [N,K]
    tt=t[None,:]; t2=r16(tt*tt); outs=[]
    for fused in itertools.product((False,True),repeat=K-1):
        u=coef[:,K-1:K]+0*tt
        for step,i in enumerate(range(K-2,-1,-1)):
            a=coef[:,i:i+1]
            u=r16(u*t2+a) if fused[step] else r16(r16(u*t2)+a)
        outs.append(r16(u*tt))
    u=coef[:,K-1:K]+0*tt
    for i in range(K-2,-1,-1): u=u*(tt*tt)+coef[:,i:i+1]
    outs.append(r16(u*tt))
    return np.stack(outs)
bitsr=real.astype(np.float16).view(np.uint16).astype(np.int64)
R=int(sys.argv[3]) if len(sys.argv)>3 else 4
offs=np.array(list(itertools.product(range(-R,R+1),repeat=K)))
best=None; nfound=0
for chunk in np.array_split(offs, max(1,len(offs)//20000)):
    coef=(bitsr[None,:]+chunk).astype(np.uint16).view(np.float16).astype(np.float32)
    ev=evals(coef)
    agree=(ev==ev[0:1]).all(axis=(0,2))
    nfound+=agree.sum()
    # fraction of points agreeing
print("candidates",len(offs),"all-orders-exact",nfound)
# per point agreement rate for the real rounding
coef=bitsr.astype(np.uint16).view(np.float16).astype(np.float32)[None,:]
ev=evals(coef); print("points where orders disagree (rounded real):",(~(ev==ev[0:1]).all(axis=0)).sum(), "of", half)
