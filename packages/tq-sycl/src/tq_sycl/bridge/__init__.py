"""Subprocess bridge to a SYCL build that cannot share this process (see docs/sycl.md).

The intel/llvm nightly links libsycl.so.9; torch-XPU links libsycl.so.8, and the two
runtimes cannot live in one process. ``Bridge`` runs ``python -m tq_sycl.bridge.child``
with the nightly's environment: requests and results travel as JSON lines over the
child's stdin/stdout, tensors through one POSIX shared-memory segment. No shell is
involved anywhere. This package's ``__init__`` and ``protocol``/``child`` modules import
neither torch nor tq_core, so the child never loads a second libsycl.
"""
