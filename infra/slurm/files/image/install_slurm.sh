#!/bin/bash
# Slurm-GCP @SLURM_GCP_REF@ (a tag, never a branch), as Cluster Toolkit's image build installs it.
set -euo pipefail
apt-get update
apt-get install -y git
ansible-pull -U https://github.com/GoogleCloudPlatform/slurm-gcp -C @SLURM_GCP_REF@ \
  -i localhost, --limit localhost --connection=local -e @/var/tmp/slurm_vars.json ansible/playbook.yml
