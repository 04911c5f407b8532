#!/bin/bash
set -euo pipefail
work=$(mktemp -d)
curl -fsSL -o "$work/cuda-keyring.deb" \
  https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb
dpkg -i "$work/cuda-keyring.deb"
rm -rf "$work"
apt-get update
apt-get install -y nvidia-container-toolkit
