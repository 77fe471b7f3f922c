"""tq's test and benchmark kit, shared by every package's tests, the bench and the demo.

- :func:`paged_batch` builds a :class:`PagedBatch`: requests with given sequence and query
  lengths over a paged cache with shuffled physical blocks, filled through a ``store``.
- :func:`dense_attention`: plain causal softmax attention in float64 over dense K/V, written
  independently of tq's codec and kernels (the oracle of last resort).
- :func:`assert_attention_close` / :func:`attention_error`: one tolerance rule, relative to
  the largest magnitude of the expected output, with the worst row named on failure.
- ``pytest_plugins = ["tq_core.testing.plugin"]`` gives the ``seed`` / ``gen`` fixtures
  (a fresh seed per test, printed, replayed with ``TQ_TEST_SEED``) and hypothesis profiles.
"""

from .batch import PagedBatch, block_tables, paged_batch, ragged_lengths, random_calibration
from .compare import assert_attention_close, attention_error
from .reference import dense_attention

__all__ = [
    "PagedBatch",
    "assert_attention_close",
    "attention_error",
    "block_tables",
    "dense_attention",
    "paged_batch",
    "ragged_lengths",
    "random_calibration",
]
