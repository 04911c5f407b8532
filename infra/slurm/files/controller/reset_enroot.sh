#!/bin/bash
# No local SSD on this node: enroot back to its defaults (files under $HOME, runtime under /run).
set -euo pipefail
rm -f /etc/enroot/enroot.conf
