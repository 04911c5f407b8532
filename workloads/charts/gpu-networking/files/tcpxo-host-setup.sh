# GPUDirect-TCPXO's host set-up on Container-Optimized OS (a GKE node, a VM of a VM group): the host firewall
# open to TCP (NCCL's and MPI's connections between hosts), the dmabuf import helper module, and the NICs'
# aperture devices (PCI 1ae0:0084) bind-mounted under /dev/aperture_devices, as GKE's TCPXO installer
# (GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpxo/nccl-tcpxo-installer.yaml) sets them up.
set -e
/sbin/iptables -I INPUT -p tcp -m tcp -j ACCEPT
modprobe import-helper
mkdir -p /dev/aperture_devices
lspci -nn -D | grep '1ae0:0084' | awk '{print $1}' | while read -r bdf; do
  target="/dev/aperture_devices/$bdf"
  mkdir -p "$target"
  umount -R "$target" 2>/dev/null || true
  mount --bind "$(readlink -f "/sys/bus/pci/devices/$bdf")" "$target"
done
chmod -R a+r /dev/aperture_devices/
chmod a+rw /dev/aperture_devices/*/resource*
