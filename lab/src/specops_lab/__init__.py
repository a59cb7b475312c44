"""The lab: stand-ins for what this machine cannot run (Proxmox VE) over real parts
(LXC, systemd), and a real vLLM CPU server with a tiny local model.

Each sub-area adds its commands to ``specops lab`` through ``specops_lab.cli``.
"""
