"""The specops CLI run by a collection's playbook is configured as the run that calls it
(filter ``specops.infra.controller_cli``).

``ansible-playbook NS.COLL.PLAYBOOK`` runs a task's controller command in the playbook's
folder inside the installed collection: there no ``ansible.cfg`` is found, so a CLI
started there read Ansible's defaults and missed the site's ``collections_path`` (the
site test's deploy failed in its benchmark: "the collection specops.infra is not
installed where Ansible finds it"). Real ``ansible-playbook``, a site folder with its own
``ansible.cfg`` and a collection holding the playbook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.specops.infra.plugins.filter.controller import controller_cli
from plugins.scripts import REPO

INFRA = REPO / "collections/ansible_collections/specops/infra"
PROBE = ("import json, os; from ansible import constants as c; print(json.dumps("
         "{'cwd': os.getcwd(), 'config': c.CONFIG_FILE,"
         " 'paths': [str(p) for p in c.COLLECTIONS_PATHS]}))")  # fmt: skip
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The probe, as a role runs the CLI.
      ansible.builtin.command:
        argv: "{{ (ansible_playbook_python | specops.infra.controller_cli(%s)) [:-2]
                  + ['-c', probe] }}"
      register: with_filter
      changed_when: false
    - name: The result.
      ansible.builtin.debug:
        msg: "PROBE {{ with_filter.stdout }}"
"""


def _site(tmp_path: Path, config_arg: str) -> Path:
    site = tmp_path / "site"
    coll = site / "collections/ansible_collections"
    (coll / "specops").mkdir(parents=True)
    (coll / "specops/infra").symlink_to(INFRA)
    book = coll / "probe/site/playbooks"
    book.mkdir(parents=True)
    (coll / "probe/site/galaxy.yml").write_text(
        "namespace: probe\nname: site\nversion: 1.0.0\nreadme: README.md\nauthors: [t]\n"
    )
    (book / "probe.yml").write_text(PLAYBOOK % config_arg)
    (site / "ansible.cfg").write_text("[defaults]\ncollections_path = collections\n")
    return site


def _probe(site: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "probe.site.probe",
         "-e", json.dumps({"probe": PROBE})],
        cwd=site, env={**env, "HOME": str(site)}, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "PROBE " in x)
    return dict(json.loads(json.loads(line.split(": ", 1)[1]).removeprefix("PROBE ")))


def test_the_cli_reads_the_runs_configuration(tmp_path: Path) -> None:
    site = _site(tmp_path, "ansible_config_file | default('')")
    seen = _probe(site)
    assert str(seen["cwd"]).endswith("collections/ansible_collections/probe/site/playbooks")
    assert seen["config"] == str(site / "ansible.cfg")
    assert seen["paths"] == [str(site / "collections")]


def test_without_it_the_cli_reads_ansibles_defaults(tmp_path: Path) -> None:
    """What the filter repairs: the same run without the configuration file named."""
    site = _site(tmp_path, "''")
    seen = _probe(site)
    assert seen["config"] is None
    assert str(site / "collections") not in seen["paths"]


def test_the_argv() -> None:
    assert controller_cli("/v/bin/python", "/s/ansible.cfg", "specops.cli") == [
        "/usr/bin/env", "ANSIBLE_CONFIG=/s/ansible.cfg", "/v/bin/python", "-m", "specops.cli"
    ]  # fmt: skip
    assert controller_cli("/v/bin/python", "") == ["/v/bin/python", "-m", "specops"]
    assert controller_cli("/v/bin/python", None) == ["/v/bin/python", "-m", "specops"]
