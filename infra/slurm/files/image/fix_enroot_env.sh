#!/bin/bash
# Disable Ubuntu 24.04's restriction on unprivileged user namespaces: required for enroot/Pyxis.
set -euo pipefail
if [ -f /proc/sys/kernel/apparmor_restrict_unprivileged_userns ]; then
  sysctl -w kernel.apparmor_restrict_unprivileged_userns=0
  echo "kernel.apparmor_restrict_unprivileged_userns = 0" > /etc/sysctl.d/90-enroot-namespaces.conf
fi
