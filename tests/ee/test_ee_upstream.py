"""The execution environment on an upstream EE base (issue 50):
ee/upstream/execution-environment.yml (Automation Platform's ee-minimal: its own Python
at python_path, microdnf), built by scripts/release/build-ee.py from the local stand-in of that
base (ee/upstream/standin/Containerfile; CI reaches no registry), then used through
ansible-navigator as AWX runs jobs. It carries the same collection and controller
package as the project's EE, found where Ansible finds them (no path set by the build);
the GPU doctor (specops.infra.verify) runs through it on the lab in
tests/deploy/test_deploy_lab.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from plugins.ee import EeImage, navigator, site_dir
from plugins.measurements import Record
from plugins.scripts import REPO, load_script

pytestmark = [pytest.mark.docker, pytest.mark.slow]

GALAXY = REPO / "collections/ansible_collections/specops/infra/galaxy.yml"
VERSION = str(yaml.safe_load(GALAXY.read_text())["version"])
build_ee = load_script("release/build-ee.py")


def test_the_upstream_ee_is_built_on_the_standin_and_reused(
    upstream_ee_image: EeImage, measurement: Record
) -> None:
    history = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", upstream_ee_image.tag],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    labels = json.loads(history)
    assert labels[build_ee.LABEL] == upstream_ee_image.inputs
    # built FROM the stand-in (its label comes down to the EE)
    upstream = yaml.safe_load(build_ee.UPSTREAM_FILE.read_text())
    assert labels["specops.standin-of"] == upstream["images"]["base_image"]["name"]
    again = build_ee.make(build_ee.UPSTREAM_TAG, definition=build_ee.UPSTREAM_FILE,
                          standin_base=True)  # fmt: skip
    assert (again.how, again.digest) == ("cached", upstream_ee_image.inputs)
    size = int(subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", upstream_ee_image.tag],
        capture_output=True, text=True, check=True).stdout)  # fmt: skip
    measurement(
        "ee-upstream-build",
        [f"EE on the upstream-style base (stand-in): {upstream_ee_image.how} in "
         f"{upstream_ee_image.seconds:.0f} s, reused in {again.seconds:.1f} s; "
         f"image {size / 1e6:.0f} MB"],
        {"how": upstream_ee_image.how, "first_s": upstream_ee_image.seconds,
         "cached_s": again.seconds, "size_bytes": size},
    )  # fmt: skip


def test_the_upstream_ee_runs_specops_on_the_images_python(
    upstream_ee_image: EeImage, tmp_path: Path
) -> None:
    site = site_dir(tmp_path / "site")
    done = navigator(upstream_ee_image, site, "exec", "--",
                     "command -v ansible-playbook; head -1 \"$(command -v specops)\";"
                     " specops --version; python3.11 -c 'import specops.collection as c;"
                     " print(c.ensure())'")  # fmt: skip
    assert done.rc == 0, done.output
    lines = done.output.strip().splitlines()
    assert lines[1] == "#!/usr/bin/python3.11"  # the image's Python, python_path
    assert f"specops {VERSION}" in lines
    # the collection from Ansible's default path, no .pth or PYTHONPATH of the build
    assert lines[-1].startswith("/usr/share/ansible/collections/"), lines[-1]
    done = navigator(upstream_ee_image, site, "run", "specops.infra.verify", "--syntax-check")
    assert done.rc == 0, done.output[-4000:]
    assert re.search(r"^playbook: /usr/share/ansible/collections/ansible_collections/specops/"
                     r"infra/playbooks/verify\.yml$", done.output, re.MULTILINE)  # fmt: skip
