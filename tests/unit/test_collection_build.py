"""The collection as the ecosystem installs it (scripts/release/build-collection.py): staged from
the repository's layout, built, installed with ``ansible-galaxy collection install`` in a
directory where no checkout is on any path, and run from there by its FQCN.

The install is offline: the dependencies galaxy.yml names (community.general,
community.proxmox, ansible.utils) are the venv's `ansible` bundle's, linked into the temp
collections path, so ``ansible-galaxy`` finds them installed and contacts no server;
``collections_scan_sys_path = false`` keeps the venv's link to the checkout's
specops.infra (scripts/setup.sh venv) out of sight. A few seconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
import yaml
from ansible.playbook.block import Block
from ansible.playbook.handler import Handler
from plugins.consumer import SITE_CFG
from plugins.scripts import REPO, load_script

bc = load_script("release/build-collection.py")
BIN = Path(sys.executable).parent
BUNDLE = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"
GALAXY_YML = REPO / "collections/ansible_collections/specops/infra/galaxy.yml"
FQCN = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+$")


@pytest.fixture(scope="module")
def tarball(collection_tarball: Path) -> Path:
    return collection_tarball


def members(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as tar:
        return {m.name for m in tar.getmembers()}


def test_the_tarball_carries_roles_playbooks_and_plugins_and_nothing_else(tarball: Path) -> None:
    names = members(tarball)
    version = yaml.safe_load(GALAXY_YML.read_text())["version"]
    assert tarball.name == f"specops-infra-{version}.tar.gz"
    roles = {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}
    assert {n.split("/")[1] for n in names if n.startswith("roles/") and "/" in n[6:]} == roles
    playbooks = {p.name for p in (REPO / "playbooks").glob("*.yml")} | {"deploy.yml"}
    playbooks |= {name.replace("-", "_") for name in playbooks}  # the FQCN aliases
    assert {n[10:] for n in names if re.fullmatch(r"playbooks/[^/]+\.yml", n)} == playbooks
    expected = {"playbooks/tasks/sweep-progress.yml", "playbooks/vars/host-batching.yml",
                "plugins/modules/pve_container.py", "meta/runtime.yml", "CHANGELOG.md",
                "changelogs/changelog.yaml"}  # fmt: skip
    assert expected <= names
    unwanted = re.compile(r"(^|/)(tests|lab|results|molecule|__pycache__|\.cache)(/|$)|\.pyc$")
    assert sorted(n for n in names if unwanted.search(n)) == []


def test_the_licence_is_in_the_tarball(tarball: Path) -> None:
    """Apache-2.0, as galaxy.yml says: the repository's LICENSE at the collection's root."""
    with tarfile.open(tarball) as tar:
        handle = tar.extractfile("LICENSE")
        assert handle is not None
        assert handle.read() == (REPO / "LICENSE").read_bytes()


def test_each_hyphenated_playbook_has_its_fqcn_alias(tmp_path: Path) -> None:
    """``specops.infra.speculative_apply`` names ``speculative-apply.yml`` (an FQCN holds no
    hyphen): the alias is committed beside it, so that a checkout's collection runs it by
    that name too; the build refuses a playbook without one, naming the command."""
    hyphenated = sorted((REPO / "playbooks").glob("*-*.yml"))
    assert {p.name for p in hyphenated} >= {"speculative-apply.yml", "preflight-nodes.yml"}
    for path in hyphenated:
        alias = path.with_name(path.name.replace("-", "_"))
        assert alias.read_text() == bc.alias_text(path.name), alias
    repo = tmp_path / "repo"
    infra = repo / bc.INFRA
    infra.mkdir(parents=True)
    for name in bc.INFRA_ENTRIES:
        source = REPO / bc.INFRA / name
        if source.is_dir():
            (infra / name).mkdir()
        elif source.is_file():
            (infra / name).write_text("x\n")
    (repo / "roles").mkdir()
    (repo / "playbooks").mkdir()
    (repo / "playbooks/host.yml").write_text("---\n")
    (repo / "playbooks/new-job.yml").write_text("---\n")
    (repo / "deploy.yml").write_text("- ansible.builtin.import_playbook: playbooks/host.yml\n")
    (repo / "LICENSE").write_text("Apache License\n")
    with pytest.raises(bc.BuildError, match=r"no FQCN alias playbooks/new_job\.yml.*--aliases"):
        bc.stage(repo, tmp_path / "stage")
    assert bc.write_aliases(repo) == [repo / "playbooks/new_job.yml"]
    assert (bc.stage(repo, tmp_path / "stage2") / "playbooks/new_job.yml").is_file()


def test_the_checkout_runs_its_collections_playbooks_by_name() -> None:
    """scripts/setup.sh venv makes specops.infra as installed out of links under
    .cache/collections (first in the checkout's collections_path): the checkout runs
    ``specops.infra.verify`` (what ``specops doctor`` runs) and
    ``specops.infra.speculative_apply`` (the sweep's applier) as a site does, from the
    checkout's own files; the collection's source directory holds no roles/ or
    playbooks/ (ansible-test and a build read it)."""
    infra = REPO / ".cache/collections/ansible_collections/specops/infra"
    assert (infra / "playbooks").is_symlink(), f"{infra}: missing; run scripts/setup.sh venv"
    assert (infra / "playbooks").resolve() == REPO / "playbooks"
    assert (infra / "roles").resolve() == REPO / "roles"
    assert (infra / "plugins").resolve() == REPO / bc.INFRA / "plugins"
    assert not (REPO / bc.INFRA / "roles").exists()
    assert not (REPO / bc.INFRA / "playbooks").exists()
    for playbook in ("verify", "speculative_apply"):
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), f"specops.infra.{playbook}", "--syntax-check"],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"playbook: {infra}/playbooks/{playbook}.yml" in done.stdout


def test_the_manifest_names_the_dependencies_galaxy_yml_pins(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        handle = tar.extractfile("MANIFEST.json")
        assert handle is not None
        info = json.load(handle)["collection_info"]
    assert info["dependencies"] == {
        "ansible.utils": ">=6.0.0,<7.0.0",
        "community.general": ">=11.4.0,<12.0.0",
        "community.proxmox": ">=1.4.0,<2.0.0",
    }
    assert info["license"] == ["Apache-2.0"]


def test_deploy_yml_moves_into_playbooks_with_its_imports(tmp_path: Path) -> None:
    coll = bc.stage(REPO, tmp_path)
    text = (coll / "playbooks/deploy.yml").read_text()
    imports = re.findall(r"import_playbook:\s*(\S+)", text)
    assert imports == ["host.yml", "container.yml", "serve.yml", "router.yml", "benchmark.yml"]
    assert all((coll / "playbooks" / name).is_file() for name in imports)
    assert not (coll / "tests").exists()


def test_a_deploy_import_outside_playbooks_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("roles", "playbooks", str(bc.INFRA)):
        (repo / name).mkdir(parents=True)
    for name in bc.INFRA_ENTRIES[2:5]:
        (repo / bc.INFRA / name).write_text("x\n")
    for name in ("plugins", "meta"):
        (repo / bc.INFRA / name).mkdir()
    (repo / "deploy.yml").write_text("- ansible.builtin.import_playbook: site/host.yml\n")
    with pytest.raises(bc.BuildError, match=r"LICENSE: missing \(the licence galaxy.yml names\)"):
        bc.stage(repo, tmp_path / "stage")
    (repo / "LICENSE").write_text("Apache License\n")
    with pytest.raises(bc.BuildError, match=r"deploy.yml imports 'site/host.yml'"):
        bc.stage(repo, tmp_path / "stage2")


def short_actions(tasks: object) -> list[str]:
    """The actions of a task list (blocks walked) that are not ``ns.collection.name``."""
    keywords = set(Handler.fattributes) | set(Block.fattributes) | {"local_action", "action"}
    short: list[str] = []
    for task in tasks if isinstance(tasks, list) else []:
        if isinstance(task, dict):
            for key in ("block", "rescue", "always"):
                short += short_actions(task.get(key))
            short += [k for k in task if k not in keywords and not k.startswith("with_")
                      and not FQCN.match(k)]  # fmt: skip
    return short


def test_every_role_task_calls_its_module_by_fqcn() -> None:
    """The roles run from the installed collection, where only FQCNs resolve the same way
    everywhere: every task's action is ``namespace.collection.name``."""
    planted = [{"name": "x", "block": [{"name": "y", "copy": {"src": "a"}, "when": "z"}]}]
    assert short_actions(planted) == ["copy"]  # the walk is not blind
    files = [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml")]
    assert len(files) > 20
    found = {str(p.relative_to(REPO)): short_actions(yaml.safe_load(p.read_text())) for p in files}
    assert {path: short for path, short in found.items() if short} == {}


def test_the_installed_collection_runs_from_a_directory_without_the_checkout(
    tarball: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    colls = tmp_path / "collections"
    for dep in ("community/general", "community/proxmox", "ansible/utils"):
        (colls / "ansible_collections" / dep).parent.mkdir(parents=True, exist_ok=True)
        (colls / "ansible_collections" / dep).symlink_to(BUNDLE / dep)
    site.mkdir()
    (site / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {colls}\ncollections_scan_sys_path = false\n"
    )
    subprocess.run(["cp", "-r", str(REPO / "inventory/example"), str(site / "inventory")],
                   check=True)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    env |= {"ANSIBLE_CONFIG": str(site / "ansible.cfg"), "HOME": str(tmp_path),
            "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:/usr/bin:/bin"}  # fmt: skip

    def run(*argv: str) -> str:
        done = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=site, env=env, check=False,
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        # CI keeps pytest's temporary directories inside the checkout (.cache/test), and
        # the interpreter's venv is the checkout's .venv: this test's own directories and
        # the interpreter's prefix (where a dependency's warning names its own file) are
        # masked, so any other checkout path is a leak.
        said = (done.stdout + done.stderr).replace(str(tmp_path), "<tmp>")
        said = said.replace(str(tarball.parent), "<dist>").replace(sys.prefix, "<venv>")
        assert str(REPO) not in said
        return done.stdout

    out = run("ansible-galaxy", "collection", "install", "--offline", "-p", str(colls),
              str(tarball))  # fmt: skip
    assert "specops.infra:" in out
    assert "community.proxmox" in out  # the dependencies were resolved, found installed
    installed = colls / "ansible_collections/specops/infra"
    for playbook in ("deploy", "verify", "benchmark", "speculative_apply"):
        out = run("ansible-playbook", f"specops.infra.{playbook}", "--syntax-check",
                  "-i", "inventory")  # fmt: skip
        assert f"playbook: {installed}/playbooks/{playbook}.yml" in out
    out = run("ansible-doc", "specops.infra.pve_container")
    assert f"{installed}/plugins/modules/pve_container.py" in out


def test_the_consumer_site_uses_the_ansible_cfg_the_docs_give() -> None:
    """tests/plugins/consumer.py's site runs with docs/install.md's ``ansible.cfg``: what
    the docs tell an operator is what the consumer test proves."""
    blocks = re.findall(r"```ini\n(.*?)```", (REPO / "docs/install.md").read_text(), re.DOTALL)
    assert blocks == [SITE_CFG]


def test_the_site_installs_the_exact_ansible_bundle_ci_runs() -> None:
    """The offline install (docs/install.md): the dependency collections come from the
    `ansible` bundle at the version CI pins (requirements.txt), named in the site's
    requirements.txt and in the docs."""
    pin = next(line for line in (REPO / "requirements.txt").read_text().splitlines()
               if line.startswith("ansible=="))  # fmt: skip
    site = (REPO / "docs/site/requirements.txt").read_text().splitlines()
    assert pin in site
    assert f"`{pin}`" in (REPO / "docs/install.md").read_text()
    version = yaml.safe_load(GALAXY_YML.read_text())["version"]
    assert f"./dist/specops-{version}-py3-none-any.whl" in site
    names = [
        c["name"]
        for c in yaml.safe_load((REPO / "docs/site/requirements.yml").read_text())["collections"]
    ]
    assert names == [f"./dist/specops-infra-{version}.tar.gz"]
