#!/usr/bin/env python3
"""The lab inventory is the example inventory plus stand-in wiring, key by key.

inventory/lab/group_vars/<group>/ must hold ``example`` (a link to
inventory/example/group_vars/<group>, reused whole) and at most one overlay file,
``lab.yml``. This prints every key where the lab differs from the example:

- a group key the overlay sets to another value than the example (or that the example
  does not set);
- a key a lab host sets in host_vars that no example host of its group sets;

and fails on any difference that inventory/lab/differences.yml does not list with a
reason, on a listed key that no longer differs (the list stays true), on a group
directory that is not shaped as above, on an inventory/lab-router (the lab with a
router in front of two serving containers) that is not inventory/lab's variables
(links) and hosts plus its own, and on a file that does not parse (named with
its line). Values are compared as written (templates
unrendered). Exit 0 when every difference is explained.

    python3 scripts/checks/check-lab-inventory.py [REPO_ROOT]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = "lab.yml"
LAB = EXAMPLE = ALLOWLIST = LAB_ROUTER = ROOT


def _use(root: Path) -> None:
    global LAB, EXAMPLE, ALLOWLIST, LAB_ROUTER  # noqa: PLW0603  (a script's paths, set once from argv)
    LAB = root / "inventory" / "lab"
    EXAMPLE = root / "inventory" / "example"
    ALLOWLIST = LAB / "differences.yml"
    LAB_ROUTER = root / "inventory" / "lab-router"


class Unreadable(Exception):
    """A file of the inventory that does not parse (the message names it, and the line)."""


def _load(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise Unreadable(f"{where}: YAML syntax error: {' '.join(str(problem).split())}") from None
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return data if isinstance(data, dict) else {}


def _group_vars(directory: Path) -> dict[str, Any]:
    """A group_vars directory's variables, merged in Ansible's (sorted) file order."""
    merged: dict[str, Any] = {}
    for path in sorted(p for p in directory.rglob("*") if p.suffix in (".yml", ".yaml")):
        merged.update(_load(path))
    return merged


def _groups_of(hosts_file: Path) -> dict[str, list[str]]:
    data = _load(hosts_file)
    children = (data.get("all") or {}).get("children") or {}
    return {g: sorted((v or {}).get("hosts") or {}) for g, v in children.items()}


def _shape_problems() -> list[str]:
    problems = []
    for group_dir in sorted(p for p in (LAB / "group_vars").iterdir()):
        name = group_dir.name
        if not group_dir.is_dir():
            problems.append(f"group_vars/{name}: use a directory (example link + {OVERLAY})")
            continue
        link = group_dir / "example"
        want = EXAMPLE / "group_vars" / name
        if not link.is_symlink() or link.resolve() != want.resolve():
            problems.append(f"group_vars/{name}/example: must link to {want}")
        extra = sorted(p.name for p in group_dir.iterdir() if p.name not in ("example", OVERLAY))
        if extra:
            problems.append(
                f"group_vars/{name}: only the example link and one overlay ({OVERLAY}); "
                f"also has {', '.join(extra)}"
            )
    for want in sorted((EXAMPLE / "group_vars").iterdir()):
        if not (LAB / "group_vars" / want.name / "example").exists():
            problems.append(f"group_vars/{want.name}: the lab does not reuse the example's")
    return problems + _lab_router_problems()


def _lab_router_problems() -> list[str]:
    """inventory/lab-router: inventory/lab's group_vars and host_vars (links), every host
    of inventory/lab in the same groups, and hosts of its own (their host_vars are the
    lab's, checked with them)."""
    if not LAB_ROUTER.exists():
        return []
    problems = []
    for group_dir in sorted((LAB / "group_vars").iterdir()):
        link = LAB_ROUTER / "group_vars" / group_dir.name
        if not link.is_symlink() or link.resolve() != group_dir.resolve():
            problems.append(f"lab-router/group_vars/{group_dir.name}: must link to {group_dir}")
    link = LAB_ROUTER / "host_vars"
    if not link.is_symlink() or link.resolve() != (LAB / "host_vars").resolve():
        problems.append(f"lab-router/host_vars: must link to {LAB / 'host_vars'}")
    router_groups = _groups_of(LAB_ROUTER / "hosts.yml")
    for group, hosts in sorted(_groups_of(LAB / "hosts.yml").items()):
        missing = sorted(set(hosts) - set(router_groups.get(group, [])))
        if missing:
            problems.append(f"lab-router/hosts.yml: {group} lacks {', '.join(missing)} (the lab's)")
    return problems


def differences() -> dict[str, dict[str, str]]:
    """Section -> key -> one line saying how the lab differs."""
    out: dict[str, dict[str, str]] = {}
    for group_dir in sorted((LAB / "group_vars").iterdir()):
        if not group_dir.is_dir():
            continue
        example = _group_vars(EXAMPLE / "group_vars" / group_dir.name)
        overlay = _load(group_dir / OVERLAY)
        for key, value in overlay.items():
            if key not in example:
                out.setdefault(group_dir.name, {})[key] = f"lab only: {value!r}"
            elif example[key] != value:
                out.setdefault(group_dir.name, {})[key] = f"{example[key]!r} -> {value!r}"
    lab_groups, example_groups = _groups_of(LAB / "hosts.yml"), _groups_of(EXAMPLE / "hosts.yml")
    if (LAB_ROUTER / "hosts.yml").is_file():  # its own hosts' host_vars are the lab's
        for group, hosts in _groups_of(LAB_ROUTER / "hosts.yml").items():
            lab_groups[group] = sorted(set(lab_groups.get(group, [])) | set(hosts))
    for group, hosts in sorted(lab_groups.items()):
        known: set[str] = set()
        for host in example_groups.get(group, []):
            known |= set(_load(EXAMPLE / "host_vars" / f"{host}.yml"))
        for host in hosts:
            for key in sorted(set(_load(LAB / "host_vars" / f"{host}.yml")) - known):
                out.setdefault(f"host_vars/{group}", {})[key] = f"set by {host}, by no example host"
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    _use(Path(args[0]).resolve() if args else ROOT)
    problems = _shape_problems()
    try:
        allow = _load(ALLOWLIST)
        found = differences()
    except Unreadable as exc:
        print(f"PROBLEM {exc}", file=sys.stderr)
        return 1
    for section, keys in sorted(found.items()):
        for key, how in sorted(keys.items()):
            reason = (allow.get(section) or {}).get(key)
            print(f"{section}: {key}: {how}")
            if not reason:
                problems.append(
                    f"{section}: {key} differs from the example with no reason in {ALLOWLIST.name}"
                )
            else:
                print(f"    why: {reason}")
    for section, keys in sorted(allow.items()):
        for key in sorted(keys or {}):
            if key not in found.get(section, {}):
                problems.append(
                    f"{section}: {key} is listed in {ALLOWLIST.name} but does not differ"
                )
    count = sum(len(k) for k in found.values())
    print(f"{count} keys where inventory/lab differs from inventory/example")
    for line in problems:
        print(f"PROBLEM {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
