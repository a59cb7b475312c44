#!/usr/bin/env bash
# Run the main job on the local lab: set up this machine, then `ansible-playbook
# deploy.yml` against inventory/lab. Extra arguments go to ansible-playbook
# (e.g. `scripts/lab.sh --check --diff`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
scripts/setup.sh packages docker image venv vllm
export PATH=$ROOT/.venv/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg
# The lab's PVE cluster (nodes from inventory/lab/hardware), host trees, template,
# API token and the API stand-in on 127.0.0.1:8006. Idempotent.
specops lab up
# The inventory reads the token secret from the environment; it is never printed.
PROXMOX_TOKEN_SECRET=$(cat /var/lib/specops/lab/secrets/pve-api-token-secret)
export PROXMOX_TOKEN_SECRET
start=$SECONDS
ansible-playbook -i inventory/lab deploy.yml "$@"
echo "lab: deploy.yml finished in $((SECONDS - start)) s"
