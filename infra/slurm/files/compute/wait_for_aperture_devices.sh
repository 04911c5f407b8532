#!/bin/bash
set -euo pipefail
mkdir -p /etc/systemd/system/slurmd.service.d
cat > /usr/local/bin/wait-for-aperture-devices.sh <<'EOF'
#!/bin/bash
# GPUDirect-TCPXO nodes only: wait up to 60 s for the aperture devices the udev rule mounts.
lspci -d 1ae0:0084 | grep -q . || exit 0
for _ in $(seq 30); do [ -n "$(ls -A /dev/aperture_devices 2>/dev/null)" ] && exit 0; sleep 2; done
exit 1
EOF
chmod 0755 /usr/local/bin/wait-for-aperture-devices.sh
printf '[Service]\nExecCondition=/usr/local/bin/wait-for-aperture-devices.sh\n' \
  > /etc/systemd/system/slurmd.service.d/aperture.conf
systemctl daemon-reload
mkdir -p @LOCAL_SSD@/enroot && chmod 1777 @LOCAL_SSD@/enroot
