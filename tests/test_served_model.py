"""Serving a model under its own name: `model.architecture` says which supported model a fine-tuned or renamed one
is; the engines' checks and arguments use it, the name stays what clients call, the fit check the declared size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.cdk.layout import stack_file
from infra.config import ConfigError, environments_dir
from infra.serving import vllm_args
from infra.serving.jetstream_args import maxtext_serving_args
from infra.synth.load import load_environment

REPO = Path(__file__).resolve().parents[1]
VLLM = "    model: {name: meta-llama/Llama-3.3-70B-Instruct, parameters_b: 70, precision: bf16, kv_cache_gb: 60}\n"
VLLM_KEY = "  llama70b-vllm:\n"
JETSTREAM = "    model: {name: llama2-70b, parameters_b: 70, precision: int8, kv_cache_gb: 32}\n"
FINE_TUNED = "acme/llama-3.3-70b-support"


def _dev_with(tmp_path: Path, vllm_model: str | None = None, jetstream_model: str | None = None) -> Path:
    """dev.yaml under tmp_path with llama70b-vllm's and llama70b-disagg's `model:` lines replaced."""
    text = (environments_dir() / "dev.yaml").read_text()
    if vllm_model is not None:
        head, _, tail = text.partition(VLLM_KEY)
        assert VLLM in tail, "dev's llama70b-vllm model line moved"
        text = head + VLLM_KEY + tail.replace(VLLM, f"    model: {vllm_model}\n", 1)
    if jetstream_model is not None:
        assert JETSTREAM in text, "dev's llama70b-disagg model line moved"
        text = text.replace(JETSTREAM, f"    model: {jetstream_model}\n")
    path = tmp_path / "environments" / "dev.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    return refused.value.problems


FINE_TUNED_VLLM = (
    f"{{name: {FINE_TUNED}, architecture: meta-llama/Llama-3.3-70B-Instruct, parameters_b: 70, precision: bf16, "
    "kv_cache_gb: 60}"
)
FINE_TUNED_JETSTREAM = (
    "{name: acme-llama2-70b-chat-ft, architecture: llama2-70b, parameters_b: 70, precision: int8, kv_cache_gb: 32}"
)


def test_a_fine_tuned_model_with_its_architecture_loads_and_is_served_under_its_own_name(tmp_path: Path) -> None:
    env = load_environment(_dev_with(tmp_path, FINE_TUNED_VLLM, FINE_TUNED_JETSTREAM))
    args = vllm_args.serve_args(env, "llama70b-vllm")
    assert f"--served-model-name={FINE_TUNED}" in args
    # The architecture's published tuning (512 tokens, 256 sequences for Llama 3.3 70B), not vLLM's defaults.
    assert "--max-num-batched-tokens=512" in args and "--max-num-seqs=256" in args
    disagg = env.serving["llama70b-disagg"]
    jetstream = maxtext_serving_args(env, disagg)  # type: ignore[arg-type]
    assert "model_name=llama2-70b" in jetstream and "ici_tensor_parallelism=8" in jetstream


def test_a_fine_tuned_name_without_an_architecture_is_refused_saying_to_give_one(tmp_path: Path) -> None:
    """Before: vLLM's refusal listed the supported models with no way forward; JetStream's was a KeyError."""
    vllm = f"{{name: {FINE_TUNED}, parameters_b: 70, precision: bf16, kv_cache_gb: 60}}"
    jetstream = "{name: acme-llama2-70b-chat-ft, parameters_b: 70, precision: int8, kv_cache_gb: 32}"
    problems = _problems(_dev_with(tmp_path, vllm, jetstream))
    (on_vllm,) = [p for p in problems if "serving.llama70b-vllm.model.name" in p]
    assert f"'{FINE_TUNED}': not a model" in on_vllm and "meta-llama/Llama-3.3-70B-Instruct" in on_vllm
    assert "say which of these it is in model.architecture" in on_vllm
    (on_jetstream,) = [p for p in problems if "serving.llama70b-disagg.model.name" in p]
    assert "'acme-llama2-70b-chat-ft': not a model MaxText knows (infra/catalogue/models.py)" in on_jetstream
    assert "known: llama2-70b, llama2-7b, llama3-8b, llama3.1-405b" in on_jetstream
    assert "say which of these it is in model.architecture" in on_jetstream


@pytest.mark.parametrize(
    ("vllm", "jetstream", "field", "fragment"),
    [
        (
            FINE_TUNED_VLLM.replace("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B"),
            None,
            "serving.llama70b-vllm.model.architecture: 'meta-llama/Llama-3.3-70B': not a model",
            "marks ✅ on v6e: Qwen/Qwen3-30B-A3B, ",
        ),
        (
            None,
            FINE_TUNED_JETSTREAM.replace("architecture: llama2-70b", "architecture: llama2-70x"),
            "serving.llama70b-disagg.model.architecture: 'llama2-70x': not a model MaxText knows",
            "known: llama2-70b, llama2-7b, llama3-8b, llama3.1-405b, llama3.1-70b, llama3.1-8b [rule",
        ),
    ],
    ids=["vllm", "jetstream"],
)
def test_an_unknown_architecture_is_refused_with_the_supported_ones(
    tmp_path: Path, vllm: str | None, jetstream: str | None, field: str, fragment: str
) -> None:
    problems = _problems(_dev_with(tmp_path, vllm, jetstream))
    assert any(field in p and fragment in p for p in problems), problems


def test_the_fit_check_uses_the_declared_size_under_the_models_own_name(tmp_path: Path) -> None:
    too_large = FINE_TUNED_VLLM.replace("parameters_b: 70", "parameters_b: 400")
    (problem,) = [p for p in _problems(_dev_with(tmp_path, too_large)) if p.startswith("serving.llama70b-vllm.model:")]
    assert f"{FINE_TUNED}: 400B parameters in bf16 need 800 GB of weights" in problem


@pytest.mark.slow
def test_a_fine_tuned_model_passes_the_plans_synth_and_rules(tmp_path: Path) -> None:
    """The plan's synth step on the edited dev alone, then every rule on its stack and rendered releases."""
    from infra.rules.run import run

    path = _dev_with(tmp_path, FINE_TUNED_VLLM, FINE_TUNED_JETSTREAM)
    out = tmp_path / "cdktf.out"
    env = {**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(path.parent), "CDKTF_OUTDIR": str(out)}
    done = subprocess.run([sys.executable, "-m", "infra"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report = run({"dev": load_environment(path)}, out / "stacks")
    assert report.ok, report.lines
    stack = stack_file(out, "platform-dev").read_text()
    assert f"--served-model-name={FINE_TUNED}" in stack and "model_name=llama2-70b" in stack
