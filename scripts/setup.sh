#!/usr/bin/env bash
# Prepare this machine for specops: the lab and the tests.
#
#   scripts/setup.sh [STEP ...]      steps: packages docker image venv vllm all (default: all)
#
# Idempotent and safe to re-run as root on a fresh Debian 12 machine. Every step says
# what it does and skips what is already there: the Debian bookworm rootfs is
# debootstrapped once and cached as a tarball; a re-run imports the cache.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SPECOPS_CACHE=${SPECOPS_CACHE:-/var/cache/specops}
VENV=${SPECOPS_VENV:-$ROOT/.venv}
IMAGE=${SPECOPS_IMAGE:-specops/debian-bookworm-systemd:latest}
ROOTFS_TAR=$SPECOPS_CACHE/debian-bookworm-rootfs.tar
# The controller's interpreter: Debian's own Python 3.11 (built with PGO and LTO: Ansible
# runs ~10 % faster on it here than on an unoptimised build earlier on PATH), else python3.
if [[ -z ${SPECOPS_PYTHON:-} && -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  PYTHON=/usr/bin/python3
else
  PYTHON=${SPECOPS_PYTHON:-python3}
fi
# lxc-templates ships /usr/share/lxc/config/<ostype>.common.conf, which a PVE node has from
# lxc-pve and the PVE stand-in includes at every container start (as PVE does).
# haproxy: the router role's load balancer, run by the tests against real backends on
# 127.0.0.1 (tests/serving/test_router_haproxy.py); no service of it starts here.
DEBIAN_PACKAGES=(docker.io debootstrap lxc lxc-templates python3-venv iproute2 uidmap openssl kmod haproxy)
# Packages inside the base image: systemd as PID 1, python3 for Ansible, sudo/acl for
# become_user, what the roles' verifiers read, and ifupdown: PVE's guest setup writes a
# Debian container's /etc/network/interfaces from its netN entries and the container's
# ifupdown brings it up (PVE's debian-12-standard template has it too). The rootfs is
# rebuilt when this list changes ($ROOTFS_TAR.packages records the list it was built with).
IMAGE_PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,acl,procps,iproute2,ca-certificates,kmod,udev,ifupdown

say() { printf '==> %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }

step_packages() {
  local missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    say "packages: all present (${DEBIAN_PACKAGES[*]})"
    return
  fi
  say "packages: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

step_docker() {
  if docker info >/dev/null 2>&1; then
    say "docker: engine answers"
    return
  fi
  say "docker: no engine answers, starting dockerd (log: /var/log/specops-dockerd.log)"
  # The machine has no init system to hand dockerd to: run it detached.
  setsid dockerd >/var/log/specops-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { say "docker: engine up"; return; }
    sleep 1
  done
  tail -n 30 /var/log/specops-dockerd.log >&2
  echo "docker: dockerd did not answer within 60 s" >&2
  exit 1
}

step_image() {
  step_docker
  if [[ -s $ROOTFS_TAR && $(cat "$ROOTFS_TAR.packages" 2>/dev/null) != "$IMAGE_PACKAGES" ]]; then
    say "image: cached rootfs was built with other packages; rebuilding it"
    rm -f "$ROOTFS_TAR"
  fi
  if [[ ! -s $ROOTFS_TAR ]]; then
    local tmp
    mkdir -p "$SPECOPS_CACHE"
    tmp=$(mktemp -d "$SPECOPS_CACHE/.rootfs.XXXXXX")
    say "image: debootstrap bookworm (minbase + $IMAGE_PACKAGES) into $tmp, once"
    debootstrap --variant=minbase --include="$IMAGE_PACKAGES" bookworm "$tmp" http://deb.debian.org/debian >/dev/null
    # A container has no consoles to start and no hostname to set from outside.
    chroot "$tmp" systemctl mask getty@tty1.service serial-getty@.service \
      systemd-logind.service console-getty.service >/dev/null 2>&1 || true
    : >"$tmp/etc/machine-id"
    chmod 0755 "$tmp"   # the rootfs's "/" (mktemp made it 0700)
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    tar -C "$tmp" --numeric-owner -cf "$ROOTFS_TAR.part" .
    mv "$ROOTFS_TAR.part" "$ROOTFS_TAR"
    echo "$IMAGE_PACKAGES" >"$ROOTFS_TAR.packages"
    rm -rf "$tmp"
    say "image: cached rootfs at $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1))"
  else
    say "image: cached rootfs found at $ROOTFS_TAR"
  fi
  # Tarballs cached before the chmod above carry a 0700 "/": non-root users of a
  # container made from it could not run anything. Repack such a tarball once.
  local root_entry
  # (head closes the pipe early: tar's SIGPIPE must not count under pipefail)
  root_entry=$(tar -tvf "$ROOTFS_TAR" | head -n 1 || true)
  if [[ ! $root_entry =~ ^drwxr-xr-x\ .*\ \./$ ]]; then
    local fix
    fix=$(mktemp -d "$SPECOPS_CACHE/.rootfs-fix.XXXXXX")
    say "image: repacking $ROOTFS_TAR with a 0755 root directory"
    tar -C "$fix" --numeric-owner -xpf "$ROOTFS_TAR"
    chmod 0755 "$fix"
    tar -C "$fix" --numeric-owner -cf "$ROOTFS_TAR.part" .
    mv "$ROOTFS_TAR.part" "$ROOTFS_TAR"
    rm -rf "$fix"
  fi
  local want have_label
  want=$(sha256sum "$ROOTFS_TAR" | cut -c1-16)
  have_label=$(docker image inspect -f '{{ index .Config.Labels "specops.rootfs" }}' "$IMAGE" 2>/dev/null || true)
  if [[ $have_label == "$want" ]]; then
    say "image: $IMAGE is current (rootfs $want)"
    return
  fi
  say "image: importing $IMAGE from the cached rootfs"
  docker import \
    --change 'CMD ["/sbin/init"]' \
    --change 'ENV container=docker' \
    --change "LABEL specops.rootfs=$want" \
    "$ROOTFS_TAR" "$IMAGE" >/dev/null
}

step_venv() {
  local stamp=$VENV/.specops-requirements.sha256 want base
  base=$(readlink -f "$(command -v "$PYTHON")")
  # Nothing installs from a lock made from other inputs than today's requirements.txt
  # and pyprojects (scripts/release/lock.py check names the stale lock and the refresh command).
  "$PYTHON" "$ROOT/scripts/release/lock.py" check controller || return 1
  # The stamp covers the lock, the projects installed from the checkout and the
  # interpreter the venv is made from.
  want=$( (cat "$ROOT/requirements.lock" "$ROOT/pyproject.toml" "$ROOT/lab/pyproject.toml"; echo "$base") | sha256sum | cut -d' ' -f1)
  if [[ -x $VENV/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    say "venv: $VENV is current"
    step_collection
    return
  fi
  say "venv: installing requirements.lock (hash-checked), specops and its lab specops-lab (editable) into $VENV (from $base)"
  [[ -L $VENV && ! -e $VENV ]] && rm -f "$VENV"  # a dangling link (a copied checkout)
  # Made anew: a venv holds exactly the lock, nothing left of an earlier one.
  "$PYTHON" -m venv --clear "$VENV"
  # --no-deps: the lock is the whole set; --require-hashes: every file is the one locked.
  "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$ROOT/requirements.lock"
  # The product and, beside it, the lab (lab/: its own distribution, which registers
  # `specops lab` in the entry-point group specops.commands); an operator installs the
  # product alone. Built with the locked setuptools, not one fetched for the build.
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT" -e "$ROOT/lab"
  step_collection
  echo "$want" >"$stamp"
}

# The collection specops.infra, installed where both Ansible and Python find it: the
# venv's site-packages/ansible_collections (Ansible scans sys.path for that directory,
# collections_scan_sys_path; Python imports ansible_collections.specops.infra.* from
# it). specops imports its module_utils from there. A checkout links it (an editable
# install, like `pip install -e`); an operator's machine installs the built collection
# instead (docs/install.md).
#
# And the collection as installed, for Ansible: .cache/collections (first in the
# checkout's collections_path) holds specops.infra as links to the checkout's plugins,
# meta, ... and to the repository's roles/ and playbooks/, the shape the built
# collection has: the checkout runs `specops.infra.verify` and the other playbooks by
# the names an installed collection has (what `specops doctor` and the sweep run). The
# collection's source directory itself stays as it is (ansible-test reads it).
step_collection() {
  local site link overlay entry
  overlay=$ROOT/.cache/collections/ansible_collections/specops/infra
  rm -rf "$overlay"
  mkdir -p "$overlay"
  for entry in plugins meta galaxy.yml README.md CHANGELOG.md changelogs; do
    ln -s "../../../../../collections/ansible_collections/specops/infra/$entry" "$overlay/$entry"
  done
  for entry in roles playbooks; do
    ln -s "../../../../../$entry" "$overlay/$entry"
  done
  say "collection: specops.infra as installed (links) in $overlay"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  link=$site/ansible_collections/specops/infra
  if [[ $(readlink "$link" 2>/dev/null) == "$ROOT/collections/ansible_collections/specops/infra" ]]; then
    say "collection: specops.infra is linked into $site"
    return
  fi
  say "collection: linking specops.infra into $site/ansible_collections"
  mkdir -p "$site/ansible_collections/specops"
  rm -rf "$link"
  ln -s "$ROOT/collections/ansible_collections/specops/infra" "$link"
}

step_vllm() {
  step_venv
  say "vllm: lab vLLM CPU venv, tiny model and CI oracle (cached under $SPECOPS_CACHE)"
  "$VENV/bin/specops" lab vllm install
  "$VENV/bin/specops" lab vllm build-model
  # The CI oracles (specops_lab.oracle.lab.CI_SPECS): built offline with the venv's torch.
  "$VENV/bin/specops" lab oracle build
  # Offline wheelhouse for serving containers without a network (molecule/inference).
  "$VENV/bin/specops" lab vllm wheelhouse
}

# Runs the named steps (each at most once) and exits non-zero when one failed. After the
# packages (the others need their tools), the docker engine and the image (debootstrap,
# disk-bound) go beside the venv and vLLM (pip, download-bound): on a fresh machine the
# two chains take minutes each and need nothing from each other.
main() {
  [[ $(id -u) == 0 ]] || { echo "setup.sh: run as root (it installs packages and starts dockerd)" >&2; exit 1; }
  local s want=" " image=() python=() image_pid="" python_pid="" rc=0
  (($#)) || set -- all
  for s in "$@"; do
    case $s in
      all) want+="packages docker image venv " ;;
      packages | docker | image | venv | vllm) want+="$s " ;;
      *) echo "setup.sh: unknown step '$s' (valid: packages docker image venv vllm all)" >&2; exit 2 ;;
    esac
  done
  if [[ $want == *" packages "* ]]; then step_packages; fi
  for s in docker image venv vllm; do
    [[ $want == *" $s "* ]] || continue
    if [[ $s == docker || $s == image ]]; then image+=("step_$s"); else python+=("step_$s"); fi
  done
  if ((${#image[@]})); then
    (for s in "${image[@]}"; do "$s"; done) &
    image_pid=$!
  fi
  if ((${#python[@]})); then
    (for s in "${python[@]}"; do "$s"; done) &
    python_pid=$!
  fi
  if [[ -n $image_pid ]] && ! wait "$image_pid"; then
    echo "setup.sh: step ${image[*]#step_} failed" >&2; rc=1
  fi
  if [[ -n $python_pid ]] && ! wait "$python_pid"; then
    echo "setup.sh: step ${python[*]#step_} failed" >&2; rc=1
  fi
  return "$rc"
}

main "$@"
