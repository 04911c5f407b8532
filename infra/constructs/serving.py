"""Values of the serving charts, one function per engine, every number taken from the slices.

Each serving deployment `<key>` of an environment becomes the Helm release
`serve-<key>` of its engine's chart, in the namespace of its identity.
"""

from __future__ import annotations

from typing import Any

from infra.catalogue import upstream
from infra.catalogue.charts import SERVING_CHART
from infra.catalogue.models import conversion_memory_gib
from infra.catalogue.serving_metrics import ADAPTER_PORT, ADAPTER_SERVICE_ACCOUNT, SCRAPE_INTERVAL, signals_of
from infra.config import (
    Autoscaling,
    CanaryServing,
    Environment,
    JetStreamServing,
    SaxmlServing,
    Serving,
    VllmServing,
)
from infra.constructs.releases import COLLECTOR, NODEPOOL_LABEL, pool_selector, slice_selector, slice_tolerations
from infra.derive.names import SYSTEM_POOL
from infra.derive.names import serving_release as release_name
from infra.serving import vllm_args as vllm
from infra.serving.cold_start import CANARY_WARM_UP, VLLM_WARM_UP_S, WarmUp, vllm_warm_up
from infra.serving.jetstream_args import maxtext_serving_args
from workloads.constants import CHECKPOINT_MOUNT

# GKE's single-cluster regional internal Application Load Balancer
# (https://cloud.google.com/kubernetes-engine/docs/how-to/gatewayclass-capabilities).
GATEWAY_CLASS = "gke-l7-rilb"


def _identity(env: Environment, d: Serving) -> tuple[str, str]:
    """(namespace, Kubernetes service account) the deployment runs as."""
    identity = env.identities[d.identity]
    return identity.namespace, identity.service_account


def saxml_values(env: Environment, key: str) -> dict[str, Any]:
    d = env.serving[key]
    assert isinstance(d, SaxmlServing)
    slices = []
    for slice_key in d.slices:
        s = env.slices[slice_key].slice
        slices.append(
            {
                "name": slice_key,
                "hosts": s.hosts,
                "chipsPerHost": s.chips_per_host,
                "nodeSelector": pool_selector(s, slice_key),
                "platformChip": s.accelerator.platform_chip,
                "platformTopology": s.topology,
            }
        )
    return {
        "images": {"admin": upstream.SAXML_ADMIN, "model": upstream.SAXML_MODEL, "http": upstream.SAXML_HTTP},
        "serviceAccountName": _identity(env, d)[1],
        "bucket": env.bucket_name(d.bucket),
        "cell": f"/sax/{key}",
        "slices": slices,
        "loadBalancer": d.load_balancer,
        "model": {
            "name": d.model.name,
            "class": d.model_class,
            "checkpoint": d.checkpoint,
            "replicas": len(slices),
        },
    }


def jetstream_values(env: Environment, key: str) -> dict[str, Any]:
    d = env.serving[key]
    assert isinstance(d, JetStreamServing)
    slices = [env.slices[k].slice for k in d.slice_keys]
    first = slices[0]
    conversion = None
    if d.conversion is not None:
        from workloads.trainer.conversion import conversion_script

        conversion = {
            # The conversion's own identity: the only writer of the models.
            "serviceAccountName": env.identities[d.conversion.identity].service_account,
            "image": env.release.images[d.conversion.image],
            "sourceBucket": env.bucket_name(d.conversion.source_bucket),
            "sourcePath": d.conversion.source_path,
            "modelSize": d.conversion.model_size,
            "modelName": d.model.catalogue_name,
            "output": f"gs://{env.bucket_name(d.bucket)}/{d.checkpoint_path}",
            "precision": d.model.precision,
            # Conversion holds the bf16 weights in host memory, with room to spare, on a node
            # of its CPU pool (rule gke.pod-fits-a-node-of-its-pool checks that it fits).
            "memory": f"{conversion_memory_gib(d.model.parameters_b)}Gi",
            "pool": d.conversion.pool,
            # The Job's script: the same commands the engine tests run (workloads/trainer/conversion.py).
            "commands": conversion_script(
                source_format="meta",
                source=f"/data/source/{d.conversion.source_path}",
                output=f"gs://{env.bucket_name(d.bucket)}/{d.checkpoint_path}",
                model_name=d.model.catalogue_name,
                model_size=d.conversion.model_size,
                precision=d.model.precision,
            ),
        }
    return {
        "images": {
            "pathwaysServer": upstream.PATHWAYS_SERVER,
            "pathwaysProxy": upstream.PATHWAYS_PROXY,
            "jetstream": upstream.JETSTREAM_PATHWAYS,
            "http": upstream.JETSTREAM_HTTP,
        },
        "serviceAccountName": _identity(env, d)[1],
        "scratch": f"gs://{env.bucket_name(d.scratch_bucket)}/pathways",
        # A chipless leader (resource manager, IFRT proxy, JetStream) on the CPU pool, and
        # one worker per TPU host; each slice's workers form one subgroup (the tutorial).
        "size": 1 + sum(s.hosts for s in slices),
        "subGroupSize": first.hosts,
        "leader": {"nodeSelector": {NODEPOOL_LABEL: SYSTEM_POOL}, "cpu": "4", "memory": "16Gi"},
        "chipsPerHost": first.chips_per_host,
        "instanceType": f"{first.accelerator.platform_chip}:{first.topology}",
        "instanceCount": len(slices),
        "nodeSelector": first.node_selector,
        "nodePools": d.slice_keys,
        "maxtextArgs": maxtext_serving_args(env, d),
        "conversion": conversion,
    }


def quantity(value: float) -> str:
    """A number as a Kubernetes quantity: whole numbers as they are, others in thousandths (0.8 -> 800m)."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


# The longest the HorizontalPodAutoscaler holds a scale-down decision and the longest period of a scaling policy
# (kubernetes/kubernetes pkg/apis/autoscaling/validation: stabilizationWindowSeconds <= 3600, periodSeconds <= 1800).
MAX_STABILIZATION_S = 3600
MAX_POLICY_PERIOD_S = 1800
# The endpoint picker's flow control queue of a pool (gateway-api-inference-extension pkg/epp/metrics/metrics.go @
# v1.5.0: a gauge labelled inference_pool), as the Custom Metrics Stackdriver Adapter serves it to an External
# metric: what scales a pool up from zero servers, where no server exports anything.
FLOW_CONTROL_QUEUE = "prometheus.googleapis.com|inference_extension_flow_control_queue_size|gauge"
# The load balancer's backend timeout of a pool's requests (GCPBackendPolicy timeoutSec), before any wait for a
# server started from zero.
BACKEND_TIMEOUT_S = 300


def scaling_behavior(warm_up_s: int) -> dict[str, Any]:
    """How fast the autoscaler removes servers, from how long one takes to warm: a lull shorter than a warm-up (up to
    the API's hour) keeps every server, and then one server goes per period, never several at once. Scaling up is
    Kubernetes' default (at once)."""
    return {
        "scaleDown": {
            "stabilizationWindowSeconds": min(MAX_STABILIZATION_S, warm_up_s),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": min(MAX_POLICY_PERIOD_S, warm_up_s)}],
        }
    }


def autoscaling_values(engine: str, autoscaling: Autoscaling | None, warm_up: WarmUp) -> dict[str, Any]:
    """A chart's `autoscaling` values: the HPA's bounds, its metric as the adapter serves it and its target, its
    behavior from the server's warm-up (scaling_behavior, and the warm-up itself for the review), and from zero
    servers the gateway's queue of the pool as an External metric (one server per request waiting)."""
    if autoscaling is None:
        return {"enabled": False, "minReplicas": 1, "maxReplicas": 1, "metric": "", "averageValue": "1"}
    signal = signals_of(engine)[autoscaling.signal]
    target = autoscaling.target if autoscaling.target is not None else signal.default_target
    return {
        "enabled": True,
        "minReplicas": autoscaling.min,
        "maxReplicas": autoscaling.max,
        "metric": signal.hpa_metric,
        "averageValue": quantity(target),
        "behavior": scaling_behavior(warm_up.seconds),
        "warmUp": {"seconds": warm_up.seconds, "basis": warm_up.basis},
        **({"fromZero": {"metric": FLOW_CONTROL_QUEUE, "averageValue": "1"}} if autoscaling.min == 0 else {}),
    }


def _group_placement(env: Environment, key: str) -> dict[str, Any]:
    """Where the groups of a vLLM deployment on slice `key` land: the slice's pool (or ComputeClass), or, on a
    counted multi-host slice (one whole slice per server), any of its pools, one group to a pool."""
    spec = env.slices[key]
    if spec.slice.multi_host and spec.count > 1:
        return {"nodeSelector": dict(spec.slice.node_selector), "groupPools": spec.pools(key)}
    return {"nodeSelector": slice_selector(env, key)}


def vllm_values(env: Environment, key: str) -> dict[str, Any]:
    d = env.serving[key]
    assert isinstance(d, VllmServing)
    s = env.slices[d.slice].slice
    budget = (d.autoscaling.cold_start_budget_s if d.autoscaling else None) or 0
    return {
        "image": env.release.images[d.image],
        "serviceAccountName": _identity(env, d)[1],
        "replicas": d.replicas,
        "autoscaling": autoscaling_values("vllm", d.autoscaling, vllm_warm_up(env, d)),
        "monitoring": {"interval": SCRAPE_INTERVAL, "collector": COLLECTOR},
        "hosts": s.hosts,
        "chipsPerHost": s.chips_per_host,
        **_group_placement(env, d.slice),
        # Only where the slice has a ComputeClass (a release on one pool keeps the values it had): its taint, and
        # one server at a time moved back up its tiers.
        **(
            {"tolerations": tolerations, "disruptionBudget": {"maxUnavailable": 1}}
            if (tolerations := slice_tolerations(env, d.slice))
            else {}
        ),
        "args": vllm.serve_args(env, key),
        **(
            {
                "loraModules": vllm.lora_modules(d),
                "adapters": {
                    "bucket": env.bucket_name(d.bucket),
                    "dir": vllm.adapters_dir(d),
                    "mount": vllm.ADAPTERS_MOUNT,
                },
            }
            if d.adapters
            else {}
        ),
        "multiHostEnv": dict(vllm.MULTIHOST_ENV) if s.multi_host else {},
        "port": vllm.PORT,
        "apiKeySecret": d.api_key_secret,
        # The persistent XLA compilation cache: this release's folder; each host of each group writes its own.
        "xlaCache": {"bucket": env.bucket_name(d.cache_bucket), "path": f"xla-cache/{release_name(key)}"},
        "xlaCacheMount": "/data/xla-cache",
        "startupBudgetSeconds": VLLM_WARM_UP_S,
        "rayJoinTimeoutSeconds": 1800,
        "gateway": {
            "enabled": d.gateway,
            "className": GATEWAY_CLASS,
            "eppImage": upstream.GAIE_EPP,
            # From zero servers a request waits in the picker's flow control queue for at most the budget, and the
            # load balancer waits that much longer for its answer.
            "queueSeconds": budget,
            "backendTimeoutSeconds": BACKEND_TIMEOUT_S + budget,
        },
    }


def canary_values(env: Environment, key: str) -> dict[str, Any]:
    d = env.serving[key]
    assert isinstance(d, CanaryServing)
    return {
        "image": env.release.images[d.image],
        "serviceAccountName": _identity(env, d)[1],
        "replicas": d.replicas,
        "autoscaling": autoscaling_values("canary", d.autoscaling, CANARY_WARM_UP),
        "monitoring": {"interval": SCRAPE_INTERVAL},
        "checkpoints": {"bucket": env.bucket_name(d.bucket), "mountPath": CHECKPOINT_MOUNT, "path": d.path},
        "maxBatch": d.max_batch,
        "queueSize": d.queue_size,
    }


def metrics_adapter_values() -> dict[str, Any]:
    """The Custom Metrics Stackdriver Adapter (infra/catalogue/serving_metrics.py)."""
    return {"image": upstream.METRICS_ADAPTER, "serviceAccountName": ADAPTER_SERVICE_ACCOUNT, "port": ADAPTER_PORT}


VALUES = {"saxml": saxml_values, "jetstream": jetstream_values, "vllm": vllm_values, "canary": canary_values}


def serving_values(env: Environment, key: str) -> tuple[str, str, dict[str, Any]]:
    """(chart, namespace, values) of serving deployment `key`."""
    d = env.serving[key]
    return SERVING_CHART[d.engine], _identity(env, d)[0], VALUES[d.engine](env, key)
