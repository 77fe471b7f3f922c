import numpy as np, json, math
from tq_core import codebooks as cb
x=np.linspace(-8,8,1<<20); p=np.exp(-x*x/2); p/=p.sum()
def dist(c):
    c=np.sort(np.asarray(c,dtype=np.float64)); b=(c[1:]+c[:-1])/2
    idx=np.searchsorted(b,x); return float((p*(x-c[idx])**2).sum())
for bits in (5,6):
    lm=np.array(cb.lloyd_max(bits).centroids); n=len(lm); D0=dist(lm)
    print(f"bits {bits}: lloyd-max distortion {D0:.6g}")
    i=np.arange(n); t=(i-(n-1)/2)/(n/2)
    for deg in (5,7,9,11):
        V=np.stack([t**k for k in range(1,deg+1,2)],1)
        coef=np.linalg.lstsq(V,lm,rcond=None)[0]; c=V@coef
        # refine coefficients to minimize distortion (Nelder-Mead-ish via scipy if present)
        try:
            from scipy.optimize import minimize
            r=minimize(lambda a: dist(V@a), coef, method='Nelder-Mead',options=dict(maxiter=4000,xatol=1e-9,fatol=1e-12))
            c2=V@r.x; d2=dist(c2)
        except Exception as e: d2=float('nan')
        print(f"  odd deg {deg}: fit maxerr {np.abs(c-lm).max():.4f} dist {dist(c)/D0:.5f}x, optimised {d2/D0:.5f}x")
    # E2M3-like grid (sign + (bits-1) magnitude bits with subnormals), best scale
    mb=bits-1; 
    for e in (1,2,3):
        m=mb-e
        if m<0: continue
        mags=[]
        for code in range(1<<mb):
            E=code>>m; M=code&((1<<m)-1)
            v = (M/(1<<m)) if E==0 else (1+M/(1<<m))*2**(E-1)
            mags.append(v)
        mags=np.array(mags)
        # Lloyd-Max has no zero: shift grid by half a step? try both raw and with offset variant
        best=min((dist(np.concatenate([-mags[::-1],mags])*s),s) for s in np.linspace(0.05,3,600))
        print(f"  float e{e}m{m} (subnormal, +-0 dup): {best[0]/D0:.4f}x at scale {best[1]:.3f}")
        mags2=mags+ (mags[1]-mags[0])/2
        best=min((dist(np.concatenate([-mags2[::-1],mags2])*s),s) for s in np.linspace(0.05,3,600))
        print(f"  float e{e}m{m} + half step: {best[0]/D0:.4f}x at scale {best[1]:.3f}")
    u=np.arange(n)-(n-1)/2
    best=min((dist(u*s),s) for s in np.linspace(0.01,0.5,2000))
    print(f"  uniform: {best[0]/D0:.4f}x")
