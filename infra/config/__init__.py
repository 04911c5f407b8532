"""The environment model: one YAML file per environment, loaded into frozen models.

Every difference between environments is a field here; no construct looks at
an environment's name. Loading either returns a complete `Environment` or
raises `ConfigError` listing each problem with the file, the field path, the
bad value and what is allowed.

One module per concern: `base` (the base model, shared field types),
`network`, `compute` (cluster and slices), `storage` (buckets, registry,
state), `identity`, `release`, `training`, `serving`, `environment` (all
sections and the checks across them) and `loading`.
"""

from infra.config.base import (
    IMAGE_DIGEST,
    VERSION,
    BucketRole,
    Cidr,
    ExactVersion,
    ImageDigest,
    KubernetesName,
    LabelKey,
    Model,
    Name,
    Problem,
    ProjectId,
    ProjectNumber,
)
from infra.config.compute import Capacity, Cluster, CpuPool, SliceSpec, SystemPool
from infra.config.environment import Environment
from infra.config.identity import Identity, gsa_account_id
from infra.config.loading import ENVIRONMENTS_DIR, ConfigError, environment_file, environments_dir, parse_environment
from infra.config.network import AuthorizedNetwork, Network
from infra.config.release import PLACEHOLDER_DIGEST, Release
from infra.config.serving import (
    BYTES_PER_PARAMETER,
    Autoscaling,
    CanaryServing,
    CheckpointConversion,
    JetStreamServing,
    SaxmlServing,
    ServedModel,
    Serving,
    VllmServing,
)
from infra.config.storage import BucketSpec, Lifecycle, Registry, RegistryCleanup, StateBackend
from infra.config.training import Batch, GpuTraining, NcclTest, PodSize, Training

__all__ = [
    "BYTES_PER_PARAMETER",
    "ENVIRONMENTS_DIR",
    "IMAGE_DIGEST",
    "PLACEHOLDER_DIGEST",
    "VERSION",
    "AuthorizedNetwork",
    "Autoscaling",
    "Batch",
    "BucketRole",
    "BucketSpec",
    "CanaryServing",
    "Capacity",
    "CheckpointConversion",
    "Cidr",
    "Cluster",
    "ConfigError",
    "CpuPool",
    "Environment",
    "ExactVersion",
    "GpuTraining",
    "Identity",
    "ImageDigest",
    "JetStreamServing",
    "KubernetesName",
    "LabelKey",
    "Lifecycle",
    "Model",
    "Name",
    "NcclTest",
    "Network",
    "PodSize",
    "Problem",
    "ProjectId",
    "ProjectNumber",
    "Registry",
    "RegistryCleanup",
    "Release",
    "SaxmlServing",
    "ServedModel",
    "Serving",
    "SliceSpec",
    "StateBackend",
    "SystemPool",
    "Training",
    "VllmServing",
    "environment_file",
    "environments_dir",
    "gsa_account_id",
    "parse_environment",
]
