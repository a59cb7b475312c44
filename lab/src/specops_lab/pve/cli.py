"""``specops lab cluster|pct|qm|api``: the PVE stand-in's command line.

``specops lab pct --node-root DIR start 100`` behaves like ``pct start 100`` on that lab
node (``scripts/lab/pct`` is a ``pct``-named wrapper). ``specops lab api serve`` serves
the REST stand-in on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path

from specops.errors import SpecopsError, ValidationError
from specops_lab.pve import pct
from specops_lab.pve.api import load_tokens, serve
from specops_lab.pve.layout import DEFAULT_LAB_DIR, DEFAULT_LXCPATH, Node, init_cluster
from specops_lab.pve_schema import ApiError, check_call

__all__ = ["main", "register"]


def _node(args: argparse.Namespace) -> Node:
    root = args.node_root or os.environ.get("SPECOPS_LAB_NODE_ROOT")
    if not root:
        raise ValidationError(
            "--node-root", "give the lab node's root directory (or set SPECOPS_LAB_NODE_ROOT)"
        )
    return Node.from_root(Path(root).resolve())


def _print(line: str) -> None:
    print(line, flush=True)


def _cluster_init(args: argparse.Namespace) -> int:
    nodes: list[Node] = []
    for spec in args.node:
        name, _, root = spec.partition("=")
        nodes.append(
            Node(
                name=name,
                root=Path(root or args.lab_dir / name).resolve(),
                cgroup=args.cgroup,
                lxcpath=Path(args.lxcpath),
            )
        )
    templates = [Path(t).resolve() for t in args.template or []]
    for template in templates:
        if not template.is_file():
            raise ValidationError("--template", f"{template} is not a file (a rootfs tarball)")
    cluster = init_cluster(Path(args.cluster).resolve(), nodes, name=args.name)
    for node in cluster.nodes.values():
        _print(f"{node.name}: {node.root} (cgroup {node.cgroup}, lxcpath {node.lxcpath})")
        cache = node.host_path("/var/lib/vz/template/cache")
        for template in templates:
            target = cache / template.name
            if target.exists() and target.stat().st_size == template.stat().st_size:
                continue
            target.unlink(missing_ok=True)
            try:
                os.link(template, target)
            except OSError:
                shutil.copy(template, target)
            _print(f"{node.name}: template local:vztmpl/{template.name}")
    return 0


def _pct(args: argparse.Namespace) -> int:  # noqa: PLR0912  (one branch per subcommand)
    node = _node(args)
    cmd = args.pct_command
    vmid = args.vmid
    if cmd == "start":
        pct.ct_start(node, vmid, _print)
    elif cmd == "stop":
        pct.ct_stop(node, vmid, _print)
    elif cmd == "shutdown":
        pct.ct_shutdown(node, vmid, _print, timeout=args.timeout, force_stop=args.forceStop)
    elif cmd == "reboot":
        pct.ct_reboot(node, vmid, _print, timeout=args.timeout)
    elif cmd == "list":
        _print(f"{'VMID':<10} {'Status':<10} {'Lock':<12} Name")
        for ct in pct.list_cts(node):
            parsed, _ = pct.load_ct_conf(node, ct)
            status = pct.ct_status(node, ct).status
            lock = parsed.get("lock") or ""
            _print(f"{ct:<10} {status:<10} {lock:<12} {parsed.get('hostname') or ''}")
    elif cmd == "status":
        _print(f"status: {pct.ct_status(node, vmid).status}")
    elif cmd == "config":
        conf = pct.ct_config_dict(node, vmid, snapshot=args.snapshot, current=args.current)
        conf.pop("digest", None)
        pairs = conf.pop("lxc", [])
        for key in sorted(conf):
            _print(f"{key}: {str(conf[key]).rstrip()}")
        for key, value in pairs if isinstance(pairs, list) else []:
            _print(f"{key}: {value}")
    elif cmd == "exec":
        argv = [a for a in args.argv if a != "--"] if args.argv[:1] == ["--"] else args.argv
        if not argv:
            raise ValidationError("command", "give the command after '--'")
        return pct.ct_exec(node, vmid, argv, capture=False).returncode
    elif cmd == "push":
        pct.ct_push(
            node,
            vmid,
            Path(args.file),
            args.destination,
            perms=args.perms,
            user=args.user,
            group=args.group,
        )
    elif cmd == "create":
        options = {
            k: v
            for k, v in (
                ("hostname", args.hostname),
                ("rootfs", args.rootfs),
                ("storage", args.storage),
                ("memory", args.memory),
                ("cores", args.cores),
            )
            if v is not None
        }
        pct.ct_create(
            None,
            node,
            vmid,
            ostemplate=args.ostemplate,
            options=options,
            log=_print,
            start=args.start,
        )
    elif cmd == "destroy":
        pct.ct_destroy(node, vmid, _print, force=args.force)
    elif cmd == "set":
        return _pct_set(node, vmid, args.options, args.delete)
    return 0


def _pct_set(node: Node, vmid: int, options: list[str], delete: str | None) -> int:
    """``pct set VMID --key value ...``: the same schema check as the API's PUT config."""
    changes: dict[str, str] = {}
    rest = list(options)
    while rest:
        flag = rest.pop(0)
        if not flag.startswith("--") or not rest:
            raise ValidationError("options", f"want '--KEY VALUE' pairs (got {flag!r})")
        changes[flag[2:]] = rest.pop(0)
    delete = changes.pop("delete", delete)
    params: dict[str, str] = dict(changes)
    if delete:
        params["delete"] = delete
    try:
        check_call("PUT", f"/nodes/{node.name}/lxc/{vmid}/config", params)
    except ApiError as exc:
        for key, problem in (exc.errors or {}).items():
            print(f"{key}: {problem}", file=sys.stderr)
        print(exc.message, file=sys.stderr)
        return 255
    keys = [d.strip() for d in (delete or "").replace(";", ",").split(",") if d.strip()]
    pct.ct_update_config(node, vmid, changes, delete=keys)
    return 0


def _qm(args: argparse.Namespace) -> int:
    node = _node(args)
    if args.qm_command == "status":
        if not node.vm_conf(args.vmid).exists():
            raise pct.PveError(
                f"Configuration file 'nodes/{node.name}/qemu-server/"
                f"{args.vmid}.conf' does not exist"
            )
        _print(f"status: {'running' if pct.vm_running(node, args.vmid) else 'stopped'}")
    elif args.qm_command in ("start", "stop"):
        pct.vm_set_running(node, args.vmid, args.qm_command == "start")
    elif args.qm_command == "config":
        conf = pct.vm_config_dict(node, args.vmid)
        conf.pop("digest", None)
        for key in sorted(conf):
            _print(f"{key}: {str(conf[key]).rstrip()}")
    return 0


def _api_serve(args: argparse.Namespace) -> int:
    text = ""
    if args.tokens_file:
        text = Path(args.tokens_file).read_text()
    elif os.environ.get("SPECOPS_LAB_PVE_TOKENS"):
        text = os.environ["SPECOPS_LAB_PVE_TOKENS"].replace(" ", "\n")
    tokens = load_tokens(text)
    if not tokens:
        raise ValidationError(
            "--tokens-file",
            "no API token configured (lines USER@REALM!TOKENID=SECRET, or SPECOPS_LAB_PVE_TOKENS)",
        )

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)

    def ready(port: int) -> None:
        _print(f"lab PVE API on https://127.0.0.1:{port}/api2/json ({len(tokens)} token(s))")

    serve(
        Path(args.cluster).resolve(),
        tokens,
        port=args.port,
        cert_dir=Path(args.cert_dir) if args.cert_dir else None,
        quiet=args.quiet,
        ready=ready,
        request_log=Path(args.request_log) if args.request_log else None,
    )
    return 0


def register(lab: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # noqa: PLR0915
    """Add ``cluster``, ``pct``, ``qm`` and ``api`` under ``specops lab``."""
    cl = lab.add_parser("cluster", help="lab PVE cluster set-up")
    cl_sub = cl.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND", required=True)
    init = cl_sub.add_parser("init", help="create cluster.json and the nodes' PVE layout")
    init.add_argument("--cluster", required=True, help="cluster directory")
    init.add_argument("--name", default="lab", help="cluster name")
    init.add_argument(
        "--node",
        action="append",
        required=True,
        metavar="NAME[=ROOT]",
        help="a node; ROOT defaults to LAB_DIR/NAME",
    )
    init.add_argument("--lab-dir", type=Path, default=DEFAULT_LAB_DIR)
    init.add_argument(
        "--cgroup",
        choices=["v1", "v2"],
        default="v2",
        help="cgroup version of the emulated PVE hosts (v2: PVE 7+)",
    )
    init.add_argument("--lxcpath", default=str(DEFAULT_LXCPATH))
    init.add_argument(
        "--template",
        action="append",
        metavar="TARBALL",
        help="a rootfs tarball to put in every node's local storage as local:vztmpl/NAME "
        "(hard link, else copy); e.g. $SPECOPS_CACHE/debian-bookworm-rootfs.tar",
    )
    init.set_defaults(func=_cluster_init)

    p = lab.add_parser("pct", help="pct stand-in for one lab node")
    p.add_argument("--node-root", help="the lab node's root (or SPECOPS_LAB_NODE_ROOT)")
    sub = p.add_subparsers(dest="pct_command", metavar="SUBCOMMAND", required=True)
    for name in (
        "start",
        "stop",
        "status",
        "destroy",
        "reboot",
        "shutdown",
        "config",
        "exec",
        "push",
        "create",
        "set",
    ):
        sp = sub.add_parser(name)
        sp.add_argument("vmid", type=int)
        sp.set_defaults(func=_pct)
        if name in ("shutdown", "reboot"):
            sp.add_argument("--timeout", type=int, default=60)
        if name == "shutdown":
            sp.add_argument("--forceStop", action="store_true")
        if name == "destroy":
            sp.add_argument("--force", action="store_true")
        if name == "config":
            sp.add_argument("--snapshot")
            sp.add_argument("--current", action="store_true")
        if name == "exec":
            sp.add_argument("argv", nargs=argparse.REMAINDER)
        if name == "push":
            sp.add_argument("file")
            sp.add_argument("destination")
            sp.add_argument("--perms")
            sp.add_argument("--user")
            sp.add_argument("--group")
        if name == "create":
            sp.add_argument("ostemplate", help="e.g. local:vztmpl/debian-bookworm-rootfs.tar")
            sp.add_argument("--hostname")
            sp.add_argument("--rootfs")
            sp.add_argument("--storage")
            sp.add_argument("--memory")
            sp.add_argument("--cores")
            sp.add_argument("--start", action="store_true")
        if name == "set":
            sp.add_argument("--delete")
            sp.add_argument("options", nargs=argparse.REMAINDER)

    sl = sub.add_parser("list")
    sl.set_defaults(func=_pct, vmid=0)

    q = lab.add_parser("qm", help="qm stand-in: lab VMs are a conf plus a running flag")
    q.add_argument("--node-root")
    qsub = q.add_subparsers(dest="qm_command", metavar="SUBCOMMAND", required=True)
    for name in ("status", "start", "stop", "config"):
        sq = qsub.add_parser(name)
        sq.add_argument("vmid", type=int)
        sq.set_defaults(func=_qm)

    a = lab.add_parser("api", help="PVE REST API stand-in")
    asub = a.add_subparsers(dest="api_command", metavar="SUBCOMMAND", required=True)
    s = asub.add_parser("serve", help="serve /api2/json on 127.0.0.1 (HTTPS)")
    s.add_argument("--cluster", required=True, help="cluster directory (cluster.json)")
    s.add_argument("--port", type=int, default=8006)
    s.add_argument("--tokens-file", help="lines USER@REALM!TOKENID=SECRET")
    s.add_argument("--cert-dir", help="where the self-signed cert goes (default CLUSTER/pki)")
    s.add_argument("--quiet", action="store_true", help="no access log")
    s.add_argument(
        "--request-log",
        help="append one line per request to this file: time, method, path, status "
        "(never a header: no token)",
    )
    s.set_defaults(func=_api_serve)


def main(argv: list[str] | None = None) -> int:
    """``python -m specops_lab.pve.cli pct|qm|cluster|api ...`` without the global CLI
    (the ``scripts/lab/pct`` wrapper uses it: stdlib only, no other area's imports)."""
    parser = argparse.ArgumentParser(prog="specops lab", description=__doc__.splitlines()[0])
    register(parser.add_subparsers(dest="lab_command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except SpecopsError as exc:
        print(f"specops: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
