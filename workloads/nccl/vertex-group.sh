#!/bin/bash
# Where this replica of a Vertex AI custom job stands in its group, from Vertex AI's CLUSTER_SPEC (the
# distributed-training JSON: pool 0 holds the primary replica, pool 1 the workers, each "host:port";
# https://cloud.google.com/vertex-ai/docs/training/distributed-training), exported as the PLATFORM_HOSTS and
# PLATFORM_RANK that all-gather-mpi.sh reads; the same reading as the trainer's
# (workloads/trainer/discovery.py: from_vertex), which tests/test_vertex.py holds it to. Then it runs "$@".
set -euo pipefail
spec=$(printf '%s' "${CLUSTER_SPEC:?Vertex AI sets CLUSTER_SPEC on every replica}" | tr -d ' \n\t')
pool_hosts() {
  { printf '%s' "$spec" | grep -o "\"$1\":\[[^]]*\]" || true; } | { grep -o '"[^"]*"' || true; } | tail -n +2 \
    | tr -d '"' | cut -d: -f1 | paste -sd, -
}
primary=$(pool_hosts workerpool0)
workers=$(pool_hosts workerpool1)
if [ -z "$primary" ] || [[ "$primary" == *,* ]]; then
  echo "vertex: workerpool0 must hold the one primary replica, found '${primary}'" >&2
  exit 2
fi
task=$({ printf '%s' "$spec" | grep -o '"task":{[^}]*}' || true; })
type=$({ printf '%s' "$task" | grep -o '"type":"[^"]*"' || true; } | cut -d'"' -f4)
index=$({ printf '%s' "$task" | grep -o '"index":[0-9]*' || true; } | cut -d: -f2)
case "$type" in
  workerpool0) rank=0 ;;
  workerpool1) rank=$((1 + ${index:?vertex: the task has no index})) ;;
  *) echo "vertex: task type '${type}' is not a training replica (workerpool0 or workerpool1)" >&2; exit 2 ;;
esac
export PLATFORM_HOSTS="${primary}${workers:+,${workers}}"
export PLATFORM_RANK=$rank
exec "$@"
