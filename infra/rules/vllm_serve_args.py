"""vLLM's command line: every `vllm serve` argument of a deployment held to what vLLM's parser, its config, the TPU
platform and the vllm-tpu chart take, and kept free of credentials (the arguments are Helm values, in Terraform
state). The server's pods and its slice are `vllm.py`'s."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from infra.config.serving import VllmServing
from infra.rules import Finding, rule
from infra.rules.vllm import TPU_INFERENCE, deployments
from infra.serving import vllm_args

if TYPE_CHECKING:
    from infra.config import Environment


def serve_flags() -> set[str]:
    """Every option of `vllm serve` at the pinned version (infra/catalogue/vllm-serve-flags.txt, recorded from the
    real parser; tests/test_vllm.py regenerates it)."""
    lines = vllm_args.FLAGS_FILE.read_text().splitlines()
    return {line for line in lines if line.startswith("--")}


@rule(
    id="vllm.flags-known",
    system="vLLM",
    layer="engine-start",
    summary=(
        "Every flag a vLLM deployment passes is one of `vllm serve`'s full option names, once: vLLM's parser "
        "refuses others, silently takes a prefix of a real flag (--max-num-seq for --max-num-seqs) and keeps the "
        "last of a flag given twice (extra_args over what the platform sets), a flag and its --no- form included."
    ),
    source=(
        f"vLLM {vllm_args.VLLM_VERSION} `vllm serve` parser (vllm/entrypoints/launchers/cli_args.py "
        "make_arg_parser, FlexibleArgumentParser with argparse's allow_abbrev), recorded in "
        "infra/catalogue/vllm-serve-flags.txt"
    ),
    subject="environment",
)
def _flags(env: Environment) -> Iterator[Finding]:
    known = serve_flags()
    for name, d, _slice in deployments(env):
        platform = {vllm_args.flag(a) for a in vllm_args.platform_args(env, name)}
        for arg in vllm_args.serve_args(env, name):
            flag = vllm_args.flag(arg)
            if flag not in known:
                prefix = sorted(k for k in known if k.startswith(flag))
                why = f"only a prefix of {', '.join(prefix)}" if prefix else "not an option of `vllm serve`"
                yield Finding(f"serving.{name} vllm args", flag, why)

        # A boolean flag and its --no- form set one option (argparse's BooleanOptionalAction): the last one wins.
        def dest(flag: str) -> str:
            positive = "--" + flag.removeprefix("--no-")
            return positive if flag.startswith("--no-") and positive in known else flag

        platform = {dest(f) for f in platform}
        for i, arg in enumerate(d.extra_args):
            flag = dest(vllm_args.flag(arg))
            if flag in platform or flag in (dest(vllm_args.flag(a)) for a in d.extra_args[:i]):
                yield Finding(
                    f"serving.{name}.extra_args[{i}]",
                    arg,
                    f"{flag} is given already ({'by the platform' if flag in platform else 'earlier'}): "
                    "argparse silently keeps the last one",
                )


# Loaders vLLM registers (vllm/model_executor/model_loader/__init__.py) and those tpu-inference adds.
LOADERS = {
    "auto", "hf", "dummy", "fastsafetensors", "instanttensor", "ipc_cache", "mistral", "modelexpress", "npcache",
    "pt", "runai_streamer", "runai_streamer_sharded", "safetensors", "sharded_state", "tensorizer",
    "tpu_streaming_loader", "jax_dummy", "pathways_dummy",
}  # fmt: skip
# Loaders that read object storage URIs (gs://, s3://); every other reads a local path.
STREAMING_LOADERS = {"runai_streamer", "runai_streamer_sharded"}


@rule(
    id="vllm.load-format",
    system="vLLM",
    layer="engine-start",
    summary=(
        "--load-format names a loader vLLM or tpu-inference registers (the parser takes any string; an unknown "
        "one fails only at load), and a model at a gs:// URI is read by the Run:ai streamer."
    ),
    source=(
        "vllm/model_executor/model_loader/__init__.py ('Load format `x` is not supported'); tpu-inference "
        "models/vllm/vllm_model_loader.py (runai_streamer, tpu_streaming_loader), weight_utils.py, "
        "pathways_dummy_loader.py; https://docs.vllm.ai/en/latest/models/extensions/runai_model_streamer.html"
    ),
    subject="environment",
)
def _load_format(env: Environment) -> Iterator[Finding]:
    for name, _d, _slice in deployments(env):
        args = dict(a.split("=", 1) for a in vllm_args.serve_args(env, name) if "=" in a)
        loader = args.get("--load-format", "auto")
        if loader not in LOADERS:
            yield Finding(
                f"serving.{name} vllm args.--load-format", loader, f"not a loader: {', '.join(sorted(LOADERS))}"
            )
        elif args.get("--model", "").startswith(("gs://", "s3://")) and loader not in STREAMING_LOADERS:
            yield Finding(
                f"serving.{name} vllm args.--load-format",
                loader,
                f"the model is at {args['--model']}: only {', '.join(sorted(STREAMING_LOADERS))} read object storage",
            )


# tpu-inference's TPU platform refuses every other connector at start; of these, the offload ones keep the KV
# cache in the host's memory for one server (kv_both), the others move it from a prefill to a decode server.
TPU_KV_CONNECTORS = ("TPUConnector", "TPUConnectorHMA", "TPUOffloadConnector", "RaidenOffloadConnector")
# The worker counts an offload connector's staging buffer against HBM only when the module path is exactly this.
KV_OFFLOAD_MODULES = {
    "TPUOffloadConnector": "tpu_inference.offload.tpu_offload_connector",
    "RaidenOffloadConnector": "tpu_inference.offload.raiden_offload_connector",
}


@rule(
    id="vllm.kv-connector-on-tpu",
    system="vLLM on TPU (tpu-inference)",
    layer="engine-start",
    summary=(
        "A --kv-transfer-config is a JSON object naming a KV connector the TPU platform accepts; on one server "
        "(kv_both) an offload connector (the prefill/decode ones need a producer and a consumer server: "
        "disaggregated serving stays with JetStream here), with the module path the TPU worker compares "
        "(another path loads the same class but leaves its staging buffer out of the HBM budget)."
    ),
    source=(
        f"{TPU_INFERENCE} @ b8692ff0 tpu_inference/platforms/tpu_platform.py (check_and_update_config: "
        "'Unsupported kv_connector ... for the TPU platform'); tpu_inference/worker/tpu_worker.py "
        "(determine_available_memory: is_offload_connector); examples/offload/gke, examples/disagg"
    ),
    subject="environment",
)
def _kv_connector(env: Environment) -> Iterator[Finding]:
    for name, d, _slice in deployments(env):
        for i, arg in enumerate(d.extra_args):
            if vllm_args.flag(arg) != "--kv-transfer-config":
                continue
            field = f"serving.{name}.extra_args[{i}]"
            try:
                config = json.loads(arg.split("=", 1)[1]) if "=" in arg else None
            except json.JSONDecodeError as err:
                config, why = None, f"not JSON: {err}"
            else:
                why = "not a JSON object"
            if not isinstance(config, dict):
                yield Finding(field, arg, f"--kv-transfer-config={{...}}: {why}")
                continue
            connector, role = config.get("kv_connector"), config.get("kv_role")
            module = config.get("kv_connector_module_path")
            if connector not in TPU_KV_CONNECTORS:
                yield Finding(
                    f"{field}.kv_connector", connector, f"the TPU platform accepts {', '.join(TPU_KV_CONNECTORS)}"
                )
            elif connector not in KV_OFFLOAD_MODULES or role != "kv_both":
                yield Finding(
                    f"{field}.kv_role",
                    f"{connector} {role}",
                    "one server takes an offload connector as kv_both "
                    f"({', '.join(KV_OFFLOAD_MODULES)}); prefill/decode is JetStream's disaggregated deployment",
                )
            elif module != KV_OFFLOAD_MODULES[connector]:
                yield Finding(
                    f"{field}.kv_connector_module_path", module, f"{connector} needs {KV_OFFLOAD_MODULES[connector]}"
                )


# Deployment fields the platform turns into `vllm serve` flags (vllm_args.platform_args).
_FIELD_OF_FLAG = {
    "--max-model-len": "max_model_len",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-seqs": "max_num_seqs",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--model": "model_path",
    "--served-model-name": "model.name",
}


def _arg_fields(env: Environment, name: str, d: VllmServing) -> list[tuple[str, str]]:
    """(field path, argument) of every `vllm serve` argument of deployment `name`: an extra_args entry at its
    index, a platform argument at the deployment field it comes from."""
    fields = [
        (f"serving.{name}" + (f".{_FIELD_OF_FLAG[f]}" if (f := vllm_args.flag(a)) in _FIELD_OF_FLAG else ""), a)
        for a in vllm_args.platform_args(env, name)
    ]
    return fields + [(f"serving.{name}.extra_args[{i}]", a) for i, a in enumerate(d.extra_args)]


# `vllm serve` options that move the server off plain HTTP on its TCP port, where the chart's probes (httpGet,
# scheme HTTP, port http), the Service and the Inference Gateway reach it.
UNREACHABLE_FLAGS = {
    "--ssl-certfile": "serves HTTPS",
    "--ssl-keyfile": "serves HTTPS",
    "--ssl-ca-certs": "asks clients for certificates",
    "--ssl-cert-reqs": "asks clients for certificates",
    "--uds": "listens on a Unix socket instead of its port",
}


@rule(
    id="vllm.served-where-probes-reach",
    system="vLLM / kubelet / Inference Gateway",
    layer="pod-start",
    summary=(
        "A vLLM deployment serves plain HTTP on its port: TLS options (--ssl-*) or a Unix socket (--uds) leave "
        "the chart's HTTP probes failing (the kubelet restarts the server forever) and the Service and the "
        "Inference Gateway unable to reach it. TLS ends at the gateway's load balancer."
    ),
    source=(
        f"vLLM {vllm_args.VLLM_VERSION} `vllm serve` options --ssl-keyfile, --ssl-certfile, --ssl-ca-certs, "
        "--ssl-cert-reqs, --uds (infra/catalogue/vllm-serve-flags.txt); workloads/charts/vllm-tpu/templates/"
        "_helpers.tpl (httpGet probes on port http); https://kubernetes.io/docs/tasks/configure-pod-container/"
        "configure-liveness-readiness-startup-probes/ (httpGet scheme defaults to HTTP)"
    ),
    subject="environment",
)
def _reachable(env: Environment) -> Iterator[Finding]:
    for name, i, arg, flag in _extra_flags(env):
        if flag in UNREACHABLE_FLAGS:
            yield Finding(
                f"serving.{name}.extra_args[{i}]",
                arg,
                f"{flag} {UNREACHABLE_FLAGS[flag]}: the chart's HTTP probes, its Service and the gateway cannot "
                "reach the server; remove it (TLS ends at the gateway)",
            )


def _extra_flags(env: Environment) -> Iterator[tuple[str, int, str, str]]:
    """(deployment, index, argument, flag) of every extra_args entry of the vLLM deployments."""
    for name, d, _slice in deployments(env):
        for i, arg in enumerate(d.extra_args):
            yield name, i, arg, vllm_args.flag(arg)


@rule(
    id="vllm.args-valid",
    system="vLLM",
    layer="engine-start",
    summary=(
        "Every `vllm serve` argument of a deployment is one vLLM's parser and config take: a boolean flag alone "
        "(no value), an int or float that converts, one of an option's choices, JSON that parses, a value inside "
        "its config field's bounds (--gpu-memory-utilization in (0, 1]), and the cross-field checks of vLLM's "
        "config (--max-num-seqs <= --max-num-batched-tokens; with chunked prefill off, --max-num-batched-tokens >= "
        "--max-model-len); held at load from a description generated from the "
        "pinned vLLM, so `make plan` needs no vLLM environment."
    ),
    source=vllm_args.OPTIONS_SOURCE
    + " (make vllm-options; vllm/engine/arg_utils.py, vllm/config/cache.py, vllm/config/scheduler.py "
    "verify_max_model_len)",
    subject="environment",
)
def _args_valid(env: Environment) -> Iterator[Finding]:
    for name, d, _slice in deployments(env):
        fields = _arg_fields(env, name, d)
        for field, arg in fields:
            flag, _, value = arg.partition("=")
            why = vllm_args.value_problem(flag, value if "=" in arg else None)
            if why:
                yield Finding(field, arg, why)
        last = {vllm_args.flag(a): (f, a) for f, a in fields}  # argparse keeps the last of a flag
        for flag, why in vllm_args.cross_problems([a for _, a in fields]):
            field, arg = last.get(flag, (f"serving.{name}", flag))
            yield Finding(field, arg, why)
        # vllm/config/scheduler.py verify_max_model_len: without chunked prefill a prompt is prefilled in one
        # batch, so the batch must hold the longest sequence.
        switches = [vllm_args.flag(a) for _, a in fields if vllm_args.flag(a).endswith("-enable-chunked-prefill")]
        values = {vllm_args.flag(a): a.partition("=")[2] for _, a in fields if "=" in a}
        tokens, length = values.get("--max-num-batched-tokens", ""), values.get("--max-model-len", "")
        chunked_off = bool(switches) and switches[-1] == "--no-enable-chunked-prefill"
        if chunked_off and tokens.isdigit() and length.isdigit() and int(tokens) < int(length):
            field, arg = last["--max-num-batched-tokens"]
            yield Finding(
                field,
                arg,
                f"below --max-model-len={length} with chunked prefill off (--no-enable-chunked-prefill): vLLM "
                "refuses to start (max_num_batched_tokens is smaller than max_model_len); raise it, or keep "
                "chunked prefill on",
            )


# `vllm serve` options whose value is a credential: written in the arguments, it lands in the Helm release and so
# in Terraform state in clear text (and --api-key overrides the Secret-backed key the chart sets).
SECRET_FLAGS = {
    "--api-key": "the server's API key: set serving.<key>.api_key_secret (a Kubernetes Secret) instead",
    "--hf-token": "a Hugging Face token: the weights stream from the environment's bucket; give the flag alone to "
    "read HF_TOKEN from the pod's environment",
}


@rule(
    id="vllm.no-secrets-in-args",
    system="vLLM / Terraform state",
    layer="apply",
    summary=(
        "No credential is written into a deployment's `vllm serve` arguments (--api-key, --hf-token with a value): "
        "the arguments are Helm values, kept in Terraform state in clear text, and an --api-key there overrides "
        "the Secret-backed key (VLLM_API_KEY from api_key_secret)."
    ),
    source=(
        "https://developer.hashicorp.com/terraform/language/state/sensitive-data; vllm/entrypoints/openai/cli_args.py "
        "(--api-key, else VLLM_API_KEY); vllm/engine/arg_utils.py (--hf-token: a value, or alone for HF_TOKEN)"
    ),
    subject="environment",
)
def _no_secrets(env: Environment) -> Iterator[Finding]:
    for name, i, arg, flag in _extra_flags(env):
        if flag in SECRET_FLAGS and (flag == "--api-key" or "=" in arg):
            yield Finding(f"serving.{name}.extra_args[{i}]", f"{flag}=<redacted>", SECRET_FLAGS[flag])


CHART_SCHEMA = Path(__file__).resolve().parents[2] / "workloads" / "charts" / "vllm-tpu" / "values.schema.json"


def chart_args_pattern() -> str | None:
    """The pattern the vllm-tpu chart's values schema gives each of `args`, or None."""
    schema = json.loads(CHART_SCHEMA.read_text())
    pattern = ((schema.get("properties") or {}).get("args") or {}).get("items", {}).get("pattern")
    return str(pattern) if pattern else None


@rule(
    id="vllm.args-fit-the-chart",
    system="Helm (chart vllm-tpu)",
    layer="apply",
    summary=(
        "Every `vllm serve` argument matches the pattern the vllm-tpu chart's values schema gives `args`: Helm "
        "refuses the release otherwise (a bare boolean flag, when the schema demands --flag=value)."
    ),
    source="workloads/charts/vllm-tpu/values.schema.json (properties.args.items.pattern)",
    subject="environment",
)
def _args_fit_chart(env: Environment) -> Iterator[Finding]:
    pattern = chart_args_pattern()
    if not pattern:
        return
    for name, d, _slice in deployments(env):
        for field, arg in _arg_fields(env, name, d):
            if not re.search(pattern, arg):
                yield Finding(field, arg, f"the vllm-tpu chart's values schema takes only arguments matching {pattern}")
