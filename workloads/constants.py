"""Facts shared by the stack (chart values) and the code in the images; no heavy imports."""

# Ray in the trainer image, the Ray client in pyproject.toml and the chart's
# rayVersion must be equal (tests/test_charts.py checks all of them).
RAY_VERSION = "2.60.0"

# Where the ray-training chart mounts the checkpoint bucket (Cloud Storage FUSE).
CHECKPOINT_MOUNT = "/data/checkpoints"

# Where `make train-local` writes the canary's checkpoints and `make serve-local` reads them.
DEFAULT_LOCAL_CKPT = ".cache/canary"

# What the GKE Ray + MaxText tutorial sets on every TPU worker (its RayCluster env and its
# JaxTrainer worker_runtime_env; KubeRay's ray-cluster.tpu-v6e-16-multihost.yaml sample too):
# JAX on the TPU, and libtpu's PJRT compatibility mode. The tutorial's TPU_SLICE_BUILDER_DUMP_*
# and --xla_dump_to are debugging output, left out.
TPU_WORKER_ENV = {"JAX_PLATFORMS": "tpu", "ENABLE_PJRT_COMPATIBILITY": "true"}

# The port a multislice run's slices join on (MEGASCALE_PORT): Ray 2.60's DEFAULT_MEGASCALE_PORT
# (ray/_private/accelerators/tpu.py), which a JobSet run sets itself.
MEGASCALE_PORT = 8081

# GKE's multi-tier checkpointing: the CSI driver of the RAM-disk volume its add-on serves, and where a JobSet run's
# pods mount it (MaxText's local_checkpoint_directory).
MTC_CSI_DRIVER = "multitier-checkpoint.csi.storage.gke.io"
MTC_MOUNT = "/local"
