import numpy as np
from tq_core import codebooks as cb
x=np.linspace(-8,8,1<<20); p=np.exp(-x*x/2); p/=p.sum()
def dist(c):
    c=np.sort(np.asarray(c,dtype=np.float64)); b=(c[1:]+c[:-1])/2
    idx=np.searchsorted(b,x); return float((p*(x-c[idx])**2).sum())
for bits in (3,4,5,6):
    lm=np.array(cb.lloyd_max(bits).centroids); D0=dist(lm); mb=bits-1
    res=[]
    for e in range(0,mb+1):
        m=mb-e
        mags=[]
        for code in range(1<<mb):
            E=code>>m; M=code&((1<<m)-1)
            mags.append((M/(1<<m)) if E==0 else (1+M/(1<<m))*2**(E-1))
        mags=np.array(mags); step=mags[1]-mags[0] if len(mags)>1 else 1
        for hf in np.linspace(0,1,21):
            g=mags+hf*step
            best=min((dist(np.concatenate([-g[::-1],g])*s),s) for s in np.geomspace(0.02,4,300))
            res.append((best[0]/D0,e,m,hf,best[1]))
    res.sort(); print(bits, "LM",D0, [f"e{e}m{m} h={hf:.2f}: {r:.3f}x S={s:.3f}" for r,e,m,hf,s in res[:3]])
