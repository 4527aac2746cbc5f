#!/usr/bin/env bash
# Copy a full nginx source tree (the same upstream version as Debian's nginx)
# into $1, for builds that need the nginx binary too (the ASan build: nginx
# itself compiled with -DNGX_DEBUG_PALLOC=1 and the sanitizers).  Debian's
# nginx-dev ships headers only, so the upstream tarball comes from Debian's
# source package by name (`apt-get source`), with a deb-src entry added once.
set -euo pipefail
dest=$1
ver=$(dpkg-query -W -f='${Version}' nginx | sed 's/-.*//')
cache=${PIC_CACHE:-$HOME/.cache/ngx_pic}
tarball=$cache/nginx_$ver.orig.tar.gz
if [ ! -f "$tarball" ]; then
  mkdir -p "$cache"
  if ! apt-cache showsrc nginx >/dev/null 2>&1 || [ -z "$(apt-cache showsrc nginx 2>/dev/null)" ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "nginx-full-src: adding a deb-src entry for Debian's source packages"
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      $SUDO tee /etc/apt/sources.list.d/pic-deb-src.sources >/dev/null
    $SUDO apt-get update -qq
  fi
  # the .debian.tar may be missing from a mirror; only the orig tarball is needed
  (cd "$cache" && apt-get source --download-only "nginx=$(dpkg-query -W -f='${Version}' nginx)" \
      >/dev/null 2>&1 || apt-get source --download-only nginx >/dev/null 2>&1 || true)
  [ -f "$tarball" ] || { echo "nginx-full-src: could not fetch nginx_$ver.orig.tar.gz"; exit 1; }
fi
rm -rf "$dest"; mkdir -p "$dest"
tar -xzf "$tarball" -C "$dest" --strip-components=1
cp /usr/share/nginx/src/conf_flags "$dest/conf_flags"
