"""tq-vllm sessions."""
