"""What an environment derives per server: the `vllm serve` arguments (vllm_args) and JetStream's MaxText arguments
(jetstream_args)."""
