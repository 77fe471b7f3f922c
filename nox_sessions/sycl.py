"""tq-sycl sessions."""
