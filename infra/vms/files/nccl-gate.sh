# The NCCL all-gather gate over the first @HOSTS@ hosts (run @RUN@), in the plugin image.
if [ "$rank" -le @LAST_RANK@ ]; then
@FILES@
  cat > /etc/platform/nccl-test.env <<EOF
PLATFORM_HOSTS=$(echo "$hosts" | cut -d, -f1-@HOSTS@)
PLATFORM_RANK=$rank
@TEST_ENV@
EOF
  set +e
  docker run --rm --name=nccl-test --network=host --privileged @DEVICES@ --volume=@DRIVER_DIR@/lib64:/usr/local/nvidia/lib64 --volume=@PLUGIN_DIR@:@PLUGIN_DIR@ --volume=/dev/aperture_devices:/dev/aperture_devices --volume=@WORKDIR@:@WORKDIR@ --env-file=/etc/platform/nccl-test.env --env=LD_LIBRARY_PATH=/usr/local/nvidia/lib64 --entrypoint=bash @INSTALLER_IMAGE@ @WORKDIR@/all-gather-mpi.sh
  verdict=$?
  set -e
  report nccl-test "run @RUN@ exit $verdict (0: pass, 1: below the gate, 2: no result)"
fi
