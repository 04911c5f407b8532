#!/bin/bash
# The NCCL all-gather test over a group of GPU hosts through MPI, and its bandwidth gate, for the orchestrators
# that give the group no launcher of their own (Vertex AI custom jobs, the VM groups). One copy runs on every
# host, inside the GPUDirect-TCPXO NCCL plugin image (infra/catalogue/gpudirect.py: TCPXO.installer_image), whose
# /scripts the GKE chart uses the same way (workloads/charts/gpu-jobset). The orchestrator's start-up says
# where this host stands:
#   PLATFORM_HOSTS           the group's hosts in rank order, comma-separated
#   PLATFORM_RANK            this host's rank (0 runs the test over MPI; the others are its ranks' hosts)
#   NCCL_LIB_DIR             the plugin's directory; the image's MPI entry sources its nccl-env-profile.sh
#   NCCL_SOCKET_IFNAME       the control NIC (MPI's own traffic goes over it)
#   GPUS_PER_NODE            GPUs per host (one MPI rank each)
#   MIN_BUS_BANDWIDTH_GBPS   the gate: bus bandwidth of the largest message, GB/s
#   CHECK_BANDWIDTH          check-bandwidth.sh (the gate every orchestrator's NCCL test uses)
# Rank 0 exits with the gate's verdict (0 pass, 1 below the minimum, 2 no result); the other hosts wait until
# rank 0 is done (it touches DONE on every host over MPI, whatever the verdict) and exit 0, so the group ends
# together and its result is rank 0's.
set -euo pipefail
SCRIPTS=${SCRIPTS:-/scripts}
DONE=${DONE:-/tmp/platform-nccl-done}
IFS=, read -r -a hosts <<< "${PLATFORM_HOSTS:?the hosts of the group}"
: "${PLATFORM_RANK:?the rank of this host}" "${NCCL_LIB_DIR:?}" "${NCCL_SOCKET_IFNAME:?}" "${GPUS_PER_NODE:?}"
: "${MIN_BUS_BANDWIDTH_GBPS:?}" "${CHECK_BANDWIDTH:?}"
if (( ${#hosts[@]} < 2 )); then
  echo "the NCCL test spans at least 2 hosts; PLATFORM_HOSTS has ${#hosts[@]}" >&2
  exit 2
fi
# The image's sshd (port 222) on every host: rank 0's mpirun starts the ranks through it.
service ssh restart
if [ "$PLATFORM_RANK" != 0 ]; then
  echo "host ${hosts[$PLATFORM_RANK]} (rank $PLATFORM_RANK of ${#hosts[@]}): an MPI host until ${hosts[0]} is done"
  until [ -e "$DONE" ]; do sleep 5; done
  exit 0
fi
"$SCRIPTS/init_ssh.sh" "${hosts[@]}"
(cd "$SCRIPTS" && "$SCRIPTS/gen_hostfiles.sh" "${hosts[@]}")
release() {
  mpirun --allow-run-as-root --mca btl tcp,self --mca btl_tcp_if_include "$NCCL_SOCKET_IFNAME" \
    -np "${#hosts[@]}" --hostfile "$SCRIPTS/hostfiles${#hosts[@]}/hostfile1" touch "$DONE" || true
}
trap release EXIT
BENCHMARK=all_gather_perf NHOSTS=${#hosts[@]} GPU_PER_NODE=$GPUS_PER_NODE LD_LIBRARY_PATH="$NCCL_LIB_DIR:${LD_LIBRARY_PATH:-}" \
  "$SCRIPTS/demo-run-nccl-test-tcpxo-via-mpi.sh" 2>&1 | tee /tmp/nccl.log
sh "$CHECK_BANDWIDTH" /tmp/nccl.log "$MIN_BUS_BANDWIDTH_GBPS"
