"""The roles' own rules refused by the preflight, before any change (issue 36).

The example inventory (group_vars and host_vars, loaded by Ansible's own loader, so a
``!vault`` value and a template stay what the inventory wrote) with one bad overlay per
row: the engine/model pin and the engine agreement (the roles' asserts), plain-text
secrets, and types from the roles' argument specs. Each problem names the host and the
variable and says what would be valid. The last tests run ``playbooks/preflight.yml``
itself on a bad copy of the example and on both real inventories.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import EncryptedString
from ansible_collections.specops.infra.plugins.plugin_utils.inventory import inventory_problems
from plugins.problems import assert_named

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example"
ROLES = REPO / "roles"
LOADER = DataLoader()


def example() -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """The example's groups and each host's variables (group_vars all < group < host)."""
    tree = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]
    groups = {g: list(tree[g]["hosts"]) for g in ("pve_nodes", "serving")}
    hostvars: dict[str, dict[str, Any]] = {}
    for group, hosts in groups.items():
        for host in hosts:
            merged: dict[str, Any] = {}
            files = [*sorted((EXAMPLE / "group_vars" / "all").glob("*.yml")),
                     *sorted((EXAMPLE / "group_vars" / group).glob("*.yml")),
                     EXAMPLE / "host_vars" / f"{host}.yml"]  # fmt: skip
            for path in files:
                if path.exists():
                    merged.update(LOADER.load_from_file(str(path), trusted_as_template=True) or {})
            hostvars[host] = merged
    return groups, hostvars


def overlaid(changes: dict[str, dict[str, Any]]) -> list[str]:
    groups, hostvars = example()
    for host, values in changes.items():
        hostvars[host].update(values)
    return inventory_problems(groups, hostvars, roles=ROLES)


CT = "ct129-qwen27b"  # SGLang, Qwen/Qwen3.6-27B, two cards
CT2 = "ct131-qwen122b"
NODE = "gpu-node-01"
VAULTED = EncryptedString(ciphertext="$ANSIBLE_VAULT;1.1;AES256\n6162")
FIX = "ansible-vault encrypt_string --name"
ENV = "lookup('ansible.builtin.env'"
ARGS = "inference_service_engine_args"
PROFILE = "inference_service_speculative"
DRAFTERS = REPO / "tests" / "fixtures" / "drafter"
CUDA = "inference_service_cuda_visible_devices"
# CT on the seeds' vLLM instead (the example's commented DFlash build, its TP 2 as vLLM says it).
VLLM = {"inference_engine_engine": "vllm", "inference_engine_version": "0.20.1",
        ARGS: ["--tensor-parallel-size", "2"]}  # fmt: skip
PIN = ("needs sglang >= 0.5.11 (got 0.5.9): GDN hybrid (16 full-attention + 48 "
       "linear-attention layers): degenerate output on SGLang 0.5.9")  # fmt: skip

# row id -> (family, overlay, expected problems: each (start, text it contains))
ROWS: dict[str, tuple[str, dict[str, dict[str, Any]], list[tuple[str, str]]]] = {
    "sglang-0.5.9-for-qwen3.6": ("pin", {CT: {"inference_engine_version": "0.5.9"}},
                                 [(f"{CT}: inference_engine_version: Qwen/Qwen3.6-27B", PIN)]),
    "sglang-0.5.10-for-qwen3.6": ("pin", {CT: {"inference_engine_version": "0.5.10"}},
                                  [(f"{CT}: inference_engine_version: Qwen/Qwen3.6-27B",
                                    "needs sglang >= 0.5.11 (got 0.5.10)")]),
    "service-engine-left-over": ("engine", {CT: {"inference_service_engine": "vllm"}},
                                 [(f"{CT}: inference_service_engine: no longer read: the engine "
                                   "is stated once, by inference_engine (inference_engine_engine)",
                                   "remove this variable")]),
    # Engine arguments, TP and the cards (issue 49), before the build and the weights.
    "gpu-mem-util-misspelt": ("engine args", {CT: VLLM | {ARGS: ["--tensor-parallel-size", "2",
                                                                "--gpu-mem-util", "0.9"]}},
                              [(f"{CT}: {ARGS}[2]: --gpu-mem-util is not a vllm 0.20.1 flag",
                                "did you mean --gpu-memory-utilization")]),
    "tp-abbreviated": ("engine args", {CT: {ARGS: ["--tp", "2"]}},
                       [(f"{CT}: {ARGS}[0]: --tp is not a sglang 0.5.11 flag",
                         "did you mean --tp-size, --tensor-parallel-size"),
                        # and so no TP at all: one card's worth of the two
                        (f"{CT}: {ARGS}: TP 1 x PP 1 x DP 1 = 1 card(s), but the container "
                         "gets 2 (lxc_gpu_passthrough_gpu_count)", "TP x PP x DP = 2")]),
    "context-len-misspelt": ("engine args", {CT: {ARGS: ["--tp-size", "2", "--context-len",
                                                         "131072"]}},
                             [(f"{CT}: {ARGS}[2]: --context-len is not a sglang 0.5.11 flag",
                               "did you mean --context-length?")]),
    "tp-4-on-two-cards": ("engine args", {CT: {ARGS: ["--tp-size", "4"]}},
                          [(f"{CT}: {ARGS}: TP 4 x PP 1 x DP 1 = 4 card(s), but the container "
                            "gets 2", "such as --tp-size 2, or ask for 4 card(s)")]),
    "cuda-two-of-four": ("engine args", {CT2: {CUDA: "0,1"}},
                         [(f"{CT2}: {CUDA}: '0,1' shows the server 2 card(s) of the 4 the "
                           "container gets", "valid: 4 ids such as '0,1,2,3', or empty")]),
    # The host's minors of the node's cards 2 and 3: inside the container CUDA numbers
    # them 0 and 1 and stops at the first index it lacks (none visible: the engine fails).
    "cuda-host-minors": ("engine args", {CT: {CUDA: "2,3"}},
                         [(f"{CT}: {CUDA}: '2,3': '2', '3' not among the container's 2 card(s)"
                           " (lxc_gpu_passthrough_gpu_count)",
                           "valid: ordinals such as '0,1', GPU-/MIG- UUIDs")]),
    "context-beyond-the-model": ("engine args", {CT: {ARGS: ["--tp-size", "2", "--context-length",
                                                             "1048576"]}},
                                 [(f"{CT}: {ARGS}: --context-length 1048576 is more than "
                                   "Qwen/Qwen3.6-27B's max_position_embeddings (262144, from its "
                                   "entry in inference_engine_model_pins)", "at most 262144")]),
    "vllm-tp-x-pp-on-two-cards": ("engine args", {CT: VLLM | {ARGS: [
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]}},
                                  [(f"{CT}: {ARGS}: TP 2 x PP 2 x DP 1 = 4 card(s), but the "
                                    "container gets 2", "such as --tensor-parallel-size 2")]),
    "mem-fraction-above-one": ("engine args", {CT: {ARGS: ["--tp-size", "2",
                                                           "--mem-fraction-static", "1.5"]}},
                               [(f"{CT}: {ARGS}: --mem-fraction-static 1.5: the share of each "
                                 "card's memory", "valid: a fraction 0 < x <= 1")]),
    "vllm-0.19.0-no-flag-list": ("engine args", {CT: VLLM | {"inference_engine_version": "0.19.0"}},
                                 [(f"{CT}: inference_engine_version: vllm 0.19.0 has no recorded "
                                   "flag list (known: 0.20.1, 0.32.0)",
                                   "scripts/tools/extract-engine-flags.py")]),
    # A build as operators make it: pull requests applied on a base (the base missing).
    "patches-without-a-base": ("build", {CT: VLLM | {"inference_engine_git_patches": [
        "refs/pull/40727/head", "refs/pull/40898/head"]}},
                               [(f"{CT}: inference_engine_git_patches: apply to a git build",
                                 "set inference_engine_git_ref")]),
    "patch-commit-not-a-commit": ("build", {CT: VLLM | {
        "inference_engine_git_ref": "refs/tags/v0.20.1",
        "inference_engine_git_patches": [{"ref": "refs/pull/40898/head", "commit": "abc"}]}},
                                  [(f"{CT}: inference_engine_git_patches[0].commit: must be a "
                                    "full 40-hex commit", "'abc'")]),
    # The drafter readable here (a local directory): the node's drafter preflight runs at
    # the controller, before anything is fetched; the known drafter's pins are errors.
    "drafter-wrong-ids-and-mask": ("drafter", {CT: {
        "inference_engine_model": str(DRAFTERS / "qwen3_6-27b-target"),
        PROFILE: {"method": "dflash", "num_draft_tokens": 16,
                  "draft_model": str(DRAFTERS / "qwen3_6-27b-dflash-shifted")}}},
                                   [(f"{CT}: {PROFILE}.draft_model: drafter.dflash_config."
                                     "mask_token_id: found 248076, expected 248070 (known drafter "
                                     "z-lab/Qwen3.6-27B-DFlash", "qwen3_6-27b-dflash-shifted"),
                                    (f"{CT}: {PROFILE}.draft_model: drafter.dflash_config."
                                     "target_layer_ids: found [2, 17, 32, 47, 62], expected "
                                     "[1, 16, 31, 46, 61]", "known drafter")]),
    "pve-token-literal": ("secret", {CT: {"pve_container_api_token_secret": "0b1c-plain"}},
                          [(f"{CT}: pve_container_api_token_secret: a secret in plain text",
                            f"{FIX} pve_container_api_token_secret")]),
    "hf-token-literal": ("secret", {CT: {"inference_engine_hf_token": "hf_AbCdEf"}},
                         [(f"{CT}: inference_engine_hf_token: a secret in plain text", ENV)]),
    "token-through-a-plain-var": ("secret", {CT: {"inference_engine_hf_token": "{{ my_tok }}",
                                                  "my_tok": "hf_AbCdEf"}},
                                  [(f"{CT}: inference_engine_hf_token: reads my_tok, a secret "
                                    "in plain text", f"{FIX} my_tok")]),
    "vault-named-var-in-plain": ("secret", {CT: {"vault_pve_token_secret": "written-out"}},
                                 [(f"{CT}: pve_container_api_token_secret: reads "
                                   "vault_pve_token_secret, a secret in plain text",
                                   f"{FIX} vault_pve_token_secret")]),
    "literal-in-braces": ("secret", {CT: {"inference_engine_hf_token": "{{ 'hf_AbCdEf' }}"}},
                          [(f"{CT}: inference_engine_hf_token: a secret in plain", FIX)]),
    "token-a-number": ("secret", {CT: {"pve_container_api_token_secret": 123456}},
                       [(f"{CT}: pve_container_api_token_secret: a secret in plain", FIX)]),
    "api-key-in-secret-env": ("secret", {CT: {"inference_service_secret_environment":
                                              {"VLLM_API_KEY": "sk-inline"}}},
                              [(f"{CT}: inference_service_secret_environment.VLLM_API_KEY: a "
                                "secret in plain text", "ansible-vault encrypt_string,")]),
    "api-key-in-unit-env": ("secret", {CT: {"inference_service_environment":
                                            {"VLLM_API_KEY": "{{ vault_key }}"}}},
                            [(f"{CT}: inference_service_environment.VLLM_API_KEY: a secret in "
                              "the unit's Environment=", "inference_service_secret_environment")]),
    "migrate-token-literal": ("secret", {NODE: {"migrate_api_token_secret": "abc"}},
                              [(f"{NODE}: migrate_api_token_secret: a secret in plain", FIX)]),
    "cores-a-word": ("type", {CT: {"pve_container_cores": "sixteen"}},
                     [(f"{CT}: pve_container_cores: argument 'pve_container_cores' is of type",
                       "unable to convert to int")]),
    "memory-64G": ("type", {CT: {"pve_container_memory": "64G"}},
                   [(f"{CT}: pve_container_memory: argument", "convert to int: \"'64G'\"")]),
    "engine-args-one-string": ("type", {CT: {"inference_service_engine_args":
                                             "--tp-size 2 --context-length 131072"}},
                               [(f"{CT}: inference_service_engine_args: must be a YAML list",
                                 "not one string")]),
    "engine-not-a-choice": ("type", {CT2: {"inference_engine_engine": "sglang-0.5.11"}},
                            [(f"{CT2}: inference_engine_engine: value of inference_engine_engine"
                              " must be one of: sglang, vllm, vllm-cpu", "got: sglang-0.5.11")]),
    "onboot-a-word": ("type", {CT: {"pve_container_onboot": "sometimes"}},
                      [(f"{CT}: pve_container_onboot: argument", "bool")]),
    "all-families-at-once": ("all", {CT: {"inference_engine_version": "0.5.9",
                                          "pve_container_cores": "sixteen",
                                          "inference_engine_hf_token": "hf_x"}},
                             [(f"{CT}: pve_container_cores:", "int"),
                              (f"{CT}: inference_engine_hf_token:", FIX),
                              (f"{CT}: inference_engine_version:", "0.5.11")]),
}  # fmt: skip


@pytest.mark.parametrize(("family", "overlay", "expected"), ROWS.values(), ids=ROWS.keys())
def test_a_bad_variable_is_named_by_host_and_variable(
    family: str, overlay: dict[str, dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    problems = overlaid(overlay)
    assert_named(problems, expected)
    for values in overlay.values():  # a secret's value is never shown
        for value in values.values():
            if isinstance(value, str) and value.startswith(("hf_", "sk-", "0b1c")):
                assert not any(value in p for p in problems), problems


@pytest.mark.parametrize(
    "overlay",
    [
        {},  # the example as it is
        {CT: {"inference_engine_version": "0.5.11"}},  # the pin itself
        {CT: {"inference_engine_version": "0.5.11", "inference_engine_model": "/srv/m"}},
        {CT: {"inference_engine_version": "0.5.9",  # a git build: the role skips the pin
              "inference_engine_git_ref": "refs/pull/29907/head"}},
        {CT: VLLM | {"inference_service_speculative": {"method": "ngram",
                                                       "num_draft_tokens": 4}}},
        {CT: VLLM | {ARGS: ["--tensor-parallel-size", "1", "--data-parallel-size", "2",
                            "--max-model-len", "128k", "--gpu-memory-utilization", "0.9"]}},
        {CT2: {ARGS: ["--tp-size", "2", "--pp-size", "2"]}},  # 2 x 2 = its four cards
        {CT: {CUDA: "1,0"}},  # the container's ordinals, in an order of the operator's
        {CT: {CUDA: "GPU-8932f937,GPU-5a1c"}},  # UUID prefixes (nvidia-smi -L)
        {CT2: {ARGS: ["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"],
               CUDA: ""}},  # DP attention shares the TP cards; no CUDA_VISIBLE_DEVICES
        {CT: {"inference_engine_git_ref": "refs/pull/1/head", "inference_engine_version": "0.5.12",
              ARGS: ["--tp-size", "2", "--new-flag-of-the-pr", "x"]}},  # its own parser judges
        {CT: {"inference_engine_model": str(DRAFTERS / "qwen3_6-27b-target"),
              PROFILE: {"method": "dflash", "num_draft_tokens": 16,
                        "draft_model": str(DRAFTERS / "qwen3_6-27b-dflash")}}},  # the seeds'
        {CT: VLLM | {"inference_engine_git_ref": "refs/tags/v0.20.1",  # the seeds' DFlash build
                     "inference_engine_git_patches": ["refs/pull/40727/head",
                                                      "refs/pull/40898/head"]}},
        {CT: {PROFILE: {"method": "dflash", "num_draft_tokens": 16,  # not here: the node's
                        "draft_model": "z-lab/Qwen3.6-27B-DFlash"}}},
        {CT: {"pve_container_api_token_secret": VAULTED}},  # !vault
        {CT: {"pve_container_api_token_secret": "{{ lookup('env', 'PROXMOX_TOKEN_SECRET') }}"}},
        {CT: {"inference_engine_hf_token": "{{ lookup('ansible.builtin.file', '/k/hf') }}"}},
        {CT: {"inference_engine_hf_token": "{{ my_tok }}", "my_tok": VAULTED}},
        {CT: {"inference_service_secret_environment": {"VLLM_API_KEY": "{{ vault_api_key }}"}}},
        {CT: {"inference_engine_hf_token": "{{ hf_token_from_extra_vars }}"}},  # not here
        {CT: {"vault_pve_token_secret": VAULTED}},  # the example's convention, vaulted
        {CT: {"pve_container_cores": "16", "pve_container_memory": 65536}},  # -e gives strings
        {CT: {"inference_service_engine_args": "{{ my_args }}"}},  # a template: the role's
    ],
    ids=["example", "pin", "local-model", "git-build", "vllm", "vllm-dp", "tp-x-pp",
         "cuda-reordered", "cuda-uuids", "dp-attention", "git-build-args", "base-and-prs",
         "drafter-here",
         "drafter-on-the-node", "vault",
         "env", "file", "via-vaulted-var", "secret-env-vault", "extra-var", "vault-var",
         "digits", "args-template"],
)  # fmt: skip
def test_a_good_inventory_passes(overlay: dict[str, dict[str, Any]]) -> None:
    """The controls: each bad row above fails for the one thing it changed."""
    assert overlaid(overlay) == []


def _preflight(inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    bindir = Path(sys.executable).parent
    return subprocess.run(
        [str(bindir / "ansible-playbook"), "-i", str(inventory), *extra,
         "playbooks/preflight.yml"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
             "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
             "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"},
    )  # fmt: skip


def test_the_preflight_playbook_refuses_each_family_before_any_change(tmp_path: Path) -> None:
    """The real preflight on a bad copy of the example: the filter reads the raw values
    (a secret in group_vars is named with its file), every family is listed, nothing
    changed. CT2 has no version and no pin for its model, only a floor: the version
    checked is the engine's default from the descriptor (module_utils/engine/descriptor.py; the
    role and the preflight resolve it with one rule, engine_build.model_pin)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    ct = inventory / "host_vars" / f"{CT}.yml"
    data = yaml.safe_load(ct.read_text())
    data.update({"inference_engine_version": "0.5.9", "pve_container_memory": "64G",
                 "inference_service_engine": "vllm"})  # fmt: skip
    ct.write_text(yaml.safe_dump(data))
    ct2 = inventory / "host_vars" / f"{CT2}.yml"
    data2 = yaml.safe_load(ct2.read_text())
    data2["inference_engine_model_pins"] = {"Qwen/Qwen3.5-122B-A10B": {"sglang": {"min": "9.9"}}}
    ct2.write_text(yaml.safe_dump(data2))
    (inventory / "group_vars" / "serving" / "secrets.yml").write_text(
        "inference_engine_hf_token: hf_plain\n"
    )
    before = {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()}
    result = _preflight(inventory)
    assert result.returncode != 0, result.stdout[-3000:]
    run = json.loads(result.stdout)
    failed = [
        task["hosts"]["localhost"]["msg"]
        for task in run["plays"][0]["tasks"]
        if task["hosts"].get("localhost", {}).get("failed")
    ]
    assert len(failed) == 1, failed
    msg = failed[0]
    assert [line.split(": ", 2)[:2] for line in msg[1:]] == [
        [CT, "inference_service_engine"], [CT, "pve_container_memory"],
        [CT, "inference_engine_hf_token"], [CT, "inference_engine_version"],
        ["ct130-qwen27b", "inference_engine_hf_token"],  # the router's second 27B (issue 51)
        [CT2, "inference_engine_hf_token"], [CT2, "inference_engine_version"],
    ], msg  # fmt: skip
    assert "secrets.yml:1)" in msg[3]
    assert msg[7].startswith(
        f"{CT2}: inference_engine_version: Qwen/Qwen3.5-122B-A10B needs sglang >= 9.9 (got 0.5.11)"
    ), msg[7]
    assert "hf_plain" not in json.dumps(msg)
    assert run["stats"]["localhost"]["changed"] == 0
    assert {p: p.read_bytes() for p in inventory.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("name", ["example", "lab"])
def test_the_preflight_playbook_passes_the_real_inventories(name: str) -> None:
    """Neither real inventory is refused: the example's token is a vault_* variable,
    the lab's comes from PROXMOX_TOKEN_SECRET (its secret file for migrate)."""
    result = _preflight(REPO / "inventory" / name)
    assert result.returncode == 0, result.stdout[-3000:]


def test_vaulted_secrets_pass_the_preflight_playbook(tmp_path: Path) -> None:
    """A ``!vault`` value (encrypt_string) and a literal in a vault-encrypted file are
    kept secrets: the preflight, given the vault password, passes them without reading
    them; the same literal in a plain file is refused (the control)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    password = tmp_path / "vault-password"
    password.write_text("controller-only\n")
    vault = str(Path(sys.executable).parent / "ansible-vault")
    with_password = ("--vault-password-file", str(password))
    encrypted = subprocess.run(
        [vault, "encrypt_string", *with_password, "--name", "inference_engine_hf_token",
         "hf_vaulted"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    (inventory / "group_vars" / "serving" / "hf.yml").write_text(encrypted.stdout)
    secrets = inventory / "group_vars" / "all" / "vault.yml"
    secrets.write_text("migrate_api_token_secret: in-an-encrypted-file\n")
    plain = secrets.read_bytes()
    refused = _preflight(inventory, "--vault-password-file", str(password))
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "migrate_api_token_secret: a secret in plain text" in refused.stdout
    assert "inference_engine_hf_token" not in refused.stdout
    subprocess.run(
        [vault, "encrypt", *with_password, str(secrets)], capture_output=True, check=True
    )
    assert secrets.read_bytes() != plain
    result = _preflight(inventory, "--vault-password-file", str(password))
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_wrong_roles_directory_is_one_line(tmp_path: Path) -> None:
    groups, hostvars = example()
    assert inventory_problems(groups, hostvars, roles=tmp_path) == [
        f"preflight: roles={tmp_path}: not the specops roles directory"
    ]


# A YAML syntax error in the inventory: Ansible's own host_group_vars (2.19) names no
# file; the collection's (ansible.cfg's vars_plugins_enabled) puts file:line:column first,
# whether the play fails before its first task (group_vars/all) or inside the preflight's
# filter (a group's or a host's file).
SYNTAX_ROWS = {
    "group-vars-all": ("group_vars/all/broken.yml", "a: [1, 2\nb: 1\n",
                       ":2:2: YAML parsing failed"),
    "group-vars-serving": ("group_vars/serving/inference.yml", "x: 1\n  y: 2\n",
                           ":2:4: YAML parsing failed: Mapping values are not allowed"),
    "host-vars": (f"host_vars/{NODE}.yml", "a: 'open\n", ":2:1: YAML parsing failed"),
}  # fmt: skip


@pytest.mark.parametrize(("relative", "text", "says"), SYNTAX_ROWS.values(), ids=SYNTAX_ROWS)
def test_a_file_that_does_not_parse_is_named_by_the_playbook(
    tmp_path: Path, relative: str, text: str, says: str
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    (inventory / relative).write_text(text)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "playbooks/preflight.yml"],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'lab/src'}:{REPO / 'collections'}"},
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert f"{inventory / relative}{says}" in " ".join(out.split()), out[-3000:]
    assert "changed=1" not in out
