#!/bin/bash
# What each pod of a vLLM group runs (chart vllm-tpu). One argument says its role, the rest are vLLM's:
#   server   a single-host group: `vllm serve` with the arguments
#   leader   a multi-host group's first pod: start the group's Ray cluster, wait until every host of the
#            group has joined (LWS_GROUP_SIZE), then `vllm serve` (its Ray executor spans the hosts)
#   worker   every other pod of a multi-host group: join the leader's Ray cluster and stay in it
# A leader that does not see its whole group within RAY_JOIN_TIMEOUT_S exits, and the LeaderWorkerSet
# recreates the group (restartPolicy RecreateGroupOnPodRestart): never a server on part of its slice.
# Each host keeps its own compilation cache (VLLM_XLA_CACHE_PATH differs per host): vLLM's Ray executor
# copies the leader's VLLM_* variables to every host unless they are listed in
# $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json (vllm/ray/ray_env.py).
set -euo pipefail
role=${1:?server, leader or worker}
shift
port=${RAY_PORT:-6379}
timeout=${RAY_JOIN_TIMEOUT_S:-1800}
mkdir -p "${VLLM_CONFIG_ROOT:?}"
echo '["VLLM_XLA_CACHE_PATH"]' > "$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json"
mkdir -p "${VLLM_XLA_CACHE_PATH:?}"
alive() {
  python3 -c 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(1 for n in ray.nodes() if n["Alive"]))'
}
case "$role" in
  server)
    exec vllm serve "$@"
    ;;
  leader)
    ray start --head --port="$port" --disable-usage-stats
    deadline=$((SECONDS + timeout))
    until [ "$(alive)" -ge "${LWS_GROUP_SIZE:?}" ]; do
      if (( SECONDS >= deadline )); then
        echo "only $(alive) of ${LWS_GROUP_SIZE} hosts joined within ${timeout} s" >&2
        exit 1
      fi
      sleep 5
    done
    exec vllm serve "$@"
    ;;
  worker)
    deadline=$((SECONDS + timeout))
    until ray health-check --address="${LWS_LEADER_ADDRESS:?}:$port" >/dev/null 2>&1; do
      if (( SECONDS >= deadline )); then
        echo "the leader ${LWS_LEADER_ADDRESS} did not start Ray within ${timeout} s" >&2
        exit 1
      fi
      sleep 5
    done
    exec ray start --address="$LWS_LEADER_ADDRESS:$port" --block --disable-usage-stats
    ;;
  *)
    echo "unknown role $role: server, leader or worker" >&2
    exit 2
    ;;
esac
