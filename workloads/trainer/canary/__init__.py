"""The canary: a small Llama-style decoder that proves a slice is healthy.

It trains on the same named mesh axes as MaxText (data / fsdp / tensor),
checkpoints with orbax, resumes from the latest checkpoint, and reports loss,
tokens/s, TFLOP/s per device and MFU against the chip's peak. It is the
platform's health check for a slice, not a substitute for MaxText.
"""
