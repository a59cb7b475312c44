"""The execution environment (issue 33): built from execution-environment.yml by
scripts/release/build-ee.py on the local docker engine, then used as AWX's execution nodes use
it: ``ansible-navigator run`` of the installed collection's playbooks inside the image
(ansible-runner in the EE), from a site directory with nothing of the checkout in the
container. The benchmark playbook measures the real lab vLLM CPU server on 127.0.0.1
(the container shares the host's network). The lab runs (verify and benchmark through
the lab's lxc-attach connection) are in tests/deploy/test_deploy_lab.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from plugins.ee import EeImage, navigator, site_dir
from plugins.measurements import Record
from plugins.scripts import REPO, load_script

from specops_lab.vllm import VllmServer

pytestmark = [pytest.mark.docker, pytest.mark.slow]

GALAXY = REPO / "collections/ansible_collections/specops/infra/galaxy.yml"
VERSION = str(yaml.safe_load(GALAXY.read_text())["version"])
CT = "ct129-qwen27b"  # a serving container of inventory/example


def _playbooks() -> list[str]:
    """Every playbook the built collection carries, by FQCN (names with a hyphen have
    their underscore alias)."""
    with tarfile.open(REPO / ".cache/ee/inputs/specops-infra.tar.gz") as tar:
        names = [Path(m.name).stem for m in tar.getmembers()
                 if re.fullmatch(r"playbooks/[^/]+\.yml", m.name)]  # fmt: skip
    return sorted(f"specops.infra.{n}" for n in names if "-" not in n)


def test_the_ee_is_labelled_with_its_inputs_and_reused(
    ee_image: EeImage, measurement: Record
) -> None:
    labels = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", ee_image.tag],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    build_ee = load_script("release/build-ee.py")
    assert json.loads(labels)[build_ee.LABEL] == ee_image.inputs
    again = build_ee.make()
    assert (again.how, again.digest, again.image_id) == ("cached", ee_image.inputs,
                                                         ee_image.image_id)  # fmt: skip
    size = int(subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", ee_image.tag],
                              capture_output=True, text=True, check=True).stdout)  # fmt: skip
    measurement(
        "ee-build",
        [f"EE {ee_image.tag}: {ee_image.how} in {ee_image.seconds:.0f} s, then reused in "
         f"{again.seconds:.1f} s; image {size / 1e6:.0f} MB"],
        {"how": ee_image.how, "first_s": ee_image.seconds, "cached_s": again.seconds,
         "size_bytes": size},
    )  # fmt: skip


def test_the_ee_carries_the_collection_and_controller_of_one_version(
    ee_image: EeImage, tmp_path: Path
) -> None:
    site = site_dir(tmp_path / "site")
    done = navigator(ee_image, site, "exec", "--", "specops --version")
    assert done.rc == 0, done.output
    assert done.output.strip().splitlines()[-1] == f"specops {VERSION}"
    done = navigator(ee_image, site, "exec", "--",
                     "ansible-galaxy collection list specops.infra --format json")  # fmt: skip
    assert done.rc == 0, done.output
    # The JSON document on stdout; anything after it (a dependency's warning, where the
    # container's streams are one) is not data.
    listed, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))
    assert [c["specops.infra"]["version"] for c in listed.values()] == [VERSION]
    assert str(REPO) not in done.output


def test_every_playbook_of_the_collection_passes_syntax_check_in_the_ee(
    ee_image: EeImage, tmp_path: Path
) -> None:
    playbooks = _playbooks()
    assert {"specops.infra.deploy", "specops.infra.verify", "specops.infra.benchmark"} <= set(
        playbooks
    )
    site = site_dir(tmp_path / "site")
    done = navigator(ee_image, site, "run", *playbooks, "--syntax-check")
    assert done.rc == 0, done.output[-4000:]
    checked = re.findall(r"^playbook: (\S+)$", done.output, re.MULTILINE)
    installed = "/usr/share/ansible/collections/ansible_collections/specops/infra/playbooks"
    assert checked == [f"{installed}/{p.rsplit('.', 1)[1]}.yml" for p in playbooks]


def test_the_benchmark_playbook_in_the_ee_measures_the_real_server(
    ee_image: EeImage, vllm_ngram_server: VllmServer, tmp_path: Path, measurement: Record
) -> None:
    """specops.infra.benchmark from a site with the example inventory, limited to one
    serving container whose endpoint is the lab's vLLM CPU server on 127.0.0.1."""
    site = site_dir(tmp_path / "site")
    extra = {
        "benchmark_base_url": vllm_ngram_server.base_url,
        "benchmark_roofline_model_dir": "",  # the container is not reachable: no weights read
        "benchmark_plan": {"concurrency": [1, 2], "context_lengths": [64], "output_len": 32,
                           "requests_per_cell": 4, "warmup_per_cell": 1},
    }  # fmt: skip
    (site / "bench.yml").write_text(yaml.safe_dump(extra))
    done = navigator(ee_image, site, "run", "specops.infra.benchmark",
                     "--limit", f"localhost,{CT}", "-e", "@bench.yml")  # fmt: skip
    assert done.rc == 0, done.output[-6000:]
    assert {h: r["failed"] for h, r in done.recap().items()} == {"localhost": 0, CT: 0}
    report_m = re.search(r'"report (\S+/report\.md)"', done.output)
    assert report_m, done.output[-3000:]
    report = Path(report_m[1])
    assert report.parent.parent == site / "results" / CT  # beside the site's ansible.cfg
    assert "tok/s" in report.read_text()
    results = json.loads((report.parent / "results.json").read_text())
    assert '"failed cells: 0"' in done.output
    measurement(
        "ee-benchmark",
        [f"specops.infra.benchmark in the EE against the CPU vLLM server: {done.seconds:.0f} s "
         f"({len(results.get('cells', []))} cells)"],
        {"seconds": done.seconds},
    )  # fmt: skip
