"""The NVIDIA-only attention kernels, for GPUs of compute capability 8.9 and later.

- :mod:`.gluon_kernel`: the attention kernel with explicit layouts (Gluon);
- :mod:`.token_rows_kernel`: the token-rows kernel (Gluon, the tile's tokens on the matrix
  unit's rows) and :mod:`.token_rows_ptx`, its inline PTX;
- :mod:`.lut_ptx`: the inline PTX of the Gluon kernel's register-table lookups (``prmt``);
- :mod:`.gluon_launch`: both kernels' launches and their compiles for sm_90 without a GPU.

``tq_triton.attention.plan`` chooses them where the tuning table asks for them and they
apply (``plan.gluon_refusal``, ``plan.token_rows_refusal``); the portable kernel
(``tq_triton.attention.kernel``) serves everything else. Nothing is imported here:
``gluon_launch`` imports Gluon only inside its functions, so importing ``tq_triton`` needs
no Gluon.
"""
