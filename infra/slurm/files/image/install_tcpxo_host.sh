#!/bin/bash
set -euo pipefail
echo "deb http://packages.cloud.google.com/apt apt-transport-artifact-registry-stable main" \
  > /etc/apt/sources.list.d/artifact-registry.list
apt-get update
apt-get install -y apt-transport-artifact-registry dkms
echo "deb [arch=all trusted=yes] ar+https://us-apt.pkg.dev/projects/gce-ai-infra gpudirect-tcpxo-apt main" \
  > /etc/apt/sources.list.d/gpudirect-tcpxo.list
apt-get update
work=$(mktemp -d)
(cd "$work" && apt-get download dmabuf-import-helper && dpkg-deb -x ./*.deb .)
src=$(ls -d "$work"/usr/src/dmabuf-import-helper-*)
version=${src##*-}
rm -rf "/usr/src/dmabuf-import-helper-$version"
mv "$src" /usr/src/
sed -i 's/MODULE_IMPORT_NS(DMA_BUF)/MODULE_IMPORT_NS("DMA_BUF")/' \
  "/usr/src/dmabuf-import-helper-$version/import-helper.c"
dkms add -m dmabuf-import-helper -v "$version" || true
dkms build -m dmabuf-import-helper -v "$version"
dkms install -m dmabuf-import-helper -v "$version"
rm -rf "$work"
