"""The rules of `infra/rules/vllm_serve_args.py`, each failing on its example: an edit of dev.yaml's vLLM
deployments' `vllm serve` arguments."""

from __future__ import annotations

import copy

import pytest

from infra.rules import RULES
from tests.rules.examples import (
    DEV,
    EnvironmentExample,
    assert_every_rule_has_an_example,
    environment,
    fails_on_its_example,
)

OFFLOAD = '--kv-transfer-config={"kv_connector":"TPUOffloadConnector",' + (
    '"kv_connector_module_path":"tpu_inference.offload.tpu_offload_connector","kv_role":"kv_both"}'
)


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "vllm.served-where-probes-reach": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--uds=/tmp/vllm.sock"]),
        "serving.llama70b-vllm.extra_args[0]",
        "listens on a Unix socket",
    ),
    # argparse would take the prefix silently (--max-num-seq for --max-num-seqs).
    "vllm.flags-known": (
        lambda d, mp: mp.setattr(
            "infra.serving.vllm_args.serve_args", lambda env, key: ["--model=gs://b/m", "--max-num-seq=8"]
        ),
        "serving.llama70b-vllm vllm args",
        "only a prefix of --max-num-seqs",
    ),
    # tpu-inference refuses any other connector at start; vLLM's own config takes the name.
    "vllm.kv-connector-on-tpu": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(
            extra_args=['--kv-transfer-config={"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']
        ),
        "serving.llama70b-vllm.extra_args[0].kv_connector",
        "the TPU platform accepts TPUConnector, TPUConnectorHMA, TPUOffloadConnector",
    ),
    # vLLM's own value checks at load, from the description generated from the pinned vLLM.
    "vllm.args-valid": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--gpu-memory-utilization=1.5"]),
        "serving.llama70b-vllm.extra_args[0]",
        "--gpu-memory-utilization must be <= 1",
    ),
    # an --api-key in the arguments overrides the Secret-backed key and lands in Terraform state.
    "vllm.no-secrets-in-args": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--api-key=sk-123"]),
        "serving.llama70b-vllm.extra_args[0]",
        "set serving.<key>.api_key_secret",
    ),
    # a bare boolean flag crashed `make plan` in the rules step while the chart demands --flag=value.
    "vllm.args-fit-the-chart": (
        lambda d, mp: (
            mp.setattr("infra.rules.vllm_serve_args.chart_args_pattern", lambda: "^--[a-z0-9-]+=.+$"),
            d["serving"]["llama70b-vllm"].update(extra_args=["--enable-prefix-caching"]),
        ),
        "serving.llama70b-vllm.extra_args[0]",
        "the vllm-tpu chart's values schema takes only",
    ),
    "vllm.load-format": (
        lambda d, mp: mp.setattr("infra.serving.vllm_args.LOAD_FORMAT", "safetensors"),
        "serving.llama70b-vllm vllm args.--load-format",
        "only runai_streamer, runai_streamer_sharded read object storage",
    ),
}


@pytest.mark.parametrize(
    ("extra_args", "rule_id", "field", "fragment"),
    [
        ([OFFLOAD, "--enable-prefix-caching"], "", "", ""),
        (["--max-num-seqs=8"], "vllm.flags-known", "serving.llama70b-vllm.extra_args[0]", "given already (by the"),
        (["--enable-prefix-caching"] * 2, "vllm.flags-known", "serving.llama70b-vllm.extra_args[1]", "earlier"),
        (["--enable-prefix-cach"], "vllm.flags-known", "serving.llama70b-vllm vllm args", "only a prefix of"),
        # a flag and its --no- form, chunked prefill off below the context, TLS and a Unix socket passed.
        (
            ["--enable-prefix-caching", "--no-enable-prefix-caching"],
            "vllm.flags-known",
            "serving.llama70b-vllm.extra_args[1]",
            "--enable-prefix-caching is given already (earlier)",
        ),
        (
            ["--no-enable-chunked-prefill"],
            "vllm.args-valid",
            "serving.llama70b-vllm.max_num_batched_tokens",
            "below --max-model-len=4096 with chunked prefill off",
        ),
        (["--enable-chunked-prefill"], "", "", ""),
        (
            ["--ssl-keyfile=/tls/key.pem"],
            "vllm.served-where-probes-reach",
            "serving.llama70b-vllm.extra_args[0]",
            "HTTPS",
        ),
        (["--uds=/tmp/vllm.sock"], "vllm.served-where-probes-reach", "serving.llama70b-vllm.extra_args[0]", "Unix"),
        (["--kv-transfer-config={nope"], "vllm.kv-connector-on-tpu", "serving.llama70b-vllm.extra_args[0]", "JSON"),
        (
            [OFFLOAD.replace("kv_both", "kv_producer")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_role",
            "one server takes an offload connector as kv_both",
        ),
        (
            [OFFLOAD.replace("TPUOffloadConnector", "TPUConnector")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_role",
            "prefill/decode is JetStream's",
        ),
        (
            [OFFLOAD.replace(',"kv_connector_module_path":"tpu_inference.offload.tpu_offload_connector"', "")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_connector_module_path",
            "needs tpu_inference.offload.tpu_offload_connector",
        ),
    ],
)
def test_vllm_extra_args_are_held_to_the_parser_and_the_tpu_platform(
    extra_args: list[str], rule_id: str, field: str, fragment: str
) -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["llama70b-vllm"]["extra_args"] = extra_args
    rules = ("vllm.flags-known", "vllm.kv-connector-on-tpu", "vllm.args-valid", "vllm.served-where-probes-reach")
    found = [v for r in rules for v in RULES[r].run(environment(data))]
    if not rule_id:
        assert found == []
        return
    assert any(v.rule.id == rule_id and v.field == field and fragment in v.message for v in found), [
        v.line() for v in found
    ]


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("vllm_serve_args", ENVIRONMENT)
