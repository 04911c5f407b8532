"""The checkpoint conversion's command lines: one function for the chart and the engine tests."""

from __future__ import annotations

import shlex

from workloads.trainer.conversion import conversion_commands, conversion_script

META = dict(
    source_format="meta", source="/data/source/meta/llama3.1-405b", output="gs://b/maxtext/llama3.1-405b",
    model_name="llama3.1-405b", model_size="llama3.1-405b",
)  # fmt: skip


def test_int8_conversion_converts_verifies_quantizes_and_verifies_again() -> None:
    commands = conversion_commands(**META, precision="int8")  # type: ignore[arg-type]
    modules = [c[2] for c in commands]
    assert modules == [
        "maxtext.checkpoint_conversion.standalone_scripts.llama_ckpt_conversion_inference_only",
        "workloads.trainer.conversion",
        "maxtext.utils.layerwise_quantization",
        "workloads.trainer.conversion",
    ]
    convert, _, quantize, verify = commands
    assert convert[3:] == [
        "--base-model-path", "/data/source/meta/llama3.1-405b",
        "--maxtext-model-path", "gs://b/maxtext/llama3.1-405b/bf16", "--model-size", "llama3.1-405b",
    ]  # fmt: skip
    assert "load_parameters_path=gs://b/maxtext/llama3.1-405b/bf16/0/items" in quantize
    assert "save_quantized_params_path=gs://b/maxtext/llama3.1-405b/int8" in quantize
    assert verify[-1] == "gs://b/maxtext/llama3.1-405b/int8"
    # MaxText 0.2.5's load_and_quantize_checkpoint exits 0 without writing: never used.
    assert not any("load_and_quantize_checkpoint" in " ".join(c) for c in commands)


def test_bf16_conversion_stops_after_the_bf16_checkpoint() -> None:
    commands = conversion_commands(**META, precision="bf16")  # type: ignore[arg-type]
    assert [c[-1] for c in commands][-1] == "gs://b/maxtext/llama3.1-405b/bf16/0/items"
    assert len(commands) == 2


def test_hugging_face_sources_convert_with_to_maxtext_and_no_torch() -> None:
    hf = {**META, "source_format": "hf", "source": "/data/source/hf/llama3.1-8b", "model_name": "llama3.1-8b"}
    convert = conversion_commands(**hf, precision="bf16")[0]  # type: ignore[arg-type]
    assert convert[2] == "maxtext.checkpoint_conversion.to_maxtext"
    assert "hf_model_path=/data/source/hf/llama3.1-8b" in convert
    assert "base_output_directory=gs://b/maxtext/llama3.1-405b/bf16" in convert


def test_the_script_is_the_commands_in_order_and_stops_at_the_first_failure() -> None:
    script = conversion_script(**META, precision="int8")
    assert script.startswith("set -euo pipefail\n")
    body = script.removeprefix("set -euo pipefail\n").replace(" \\\n    ", " ").splitlines()
    assert [shlex.split(line) for line in body] == conversion_commands(**META, precision="int8")  # type: ignore[arg-type]


def test_the_jetstream_chart_job_runs_exactly_the_script_the_stack_passes() -> None:
    import yaml

    from infra.charts.check import render
    from tests.helpers import REPO

    values = yaml.safe_load((REPO / "workloads/charts/jetstream-pathways/ci/dev-serve-llama405b.yaml").read_text())
    job = next(
        o for o in render("jetstream-pathways", values, name="serve", namespace="ml-serving") if o["kind"] == "Job"
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c"]
    assert container["args"] == [values["conversion"]["commands"]]
    expected = conversion_script(
        source_format="meta",
        source=f"/data/source/{values['conversion']['sourcePath']}",
        output=values["conversion"]["output"],
        model_name=values["conversion"]["modelName"],
        model_size=values["conversion"]["modelSize"],
        precision=values["conversion"]["precision"],
    )
    assert values["conversion"]["commands"] == expected
