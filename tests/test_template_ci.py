"""The template's own CI (GitHub and GitLab): files the services accept, and a
slow tier split into shares that together run every baked combination once."""

import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, parse_shard, shard_of
from test_baked_projects import COMBINATIONS
from test_deployment_files import check_jsonschema

GITHUB = ROOT / ".github" / "workflows" / "template.yml"
GITLAB = ROOT / ".gitlab-ci.yml"


@pytest.mark.parametrize(
    ("path", "schema"),
    [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")],
    ids=["github", "gitlab"],
)
def test_the_ci_files_pass_their_services_schemas(path, schema):
    result = check_jsonschema(schema, path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_slow_jobs_run_every_share_once():
    github = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))["jobs"]["slow"]
    shards = github["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))
    command = github["steps"][-1]["run"]
    assert f"SLOW_SHARD=${{{{ matrix.shard }}}}/{len(shards)}" in command
    gitlab = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))["slow"]
    assert gitlab["parallel"] == len(shards)
    assert "SLOW_SHARD=$CI_NODE_INDEX/$CI_NODE_TOTAL" in gitlab["script"][-1]
    make = subprocess.run(
        ["make", "-n", "test-slow", "SLOW_SHARD=2/4"], cwd=ROOT, capture_output=True, text=True
    )
    assert "-m slow --slow-shard 2/4" in make.stdout, make.stdout + make.stderr


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 12])
def test_the_shares_split_the_combinations_without_overlap(n):
    shares = [shard_of(COMBINATIONS, k, n) for k in range(1, n + 1)]
    together = [combination for share in shares for combination in share]
    assert sorted(map(str, together)) == sorted(map(str, COMBINATIONS))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    # The heavy image projects, listed first, are spread as evenly.
    images = [sum(c["task"] == "image" for c in share) for share in shares]
    assert max(images) - min(images) <= 1


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "two/4", "1-4", ""])
def test_a_bad_shard_is_one_usage_error(text):
    with pytest.raises(pytest.UsageError, match=f"--slow-shard '{text}' is not K/N"):
        parse_shard(text)


def slow_ids(*shard_option):
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
         "-m", "slow", *shard_option, "tests/test_baked_projects.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    return [line for line in collected.stdout.splitlines() if "::" in line]


def test_the_shard_option_selects_its_share():
    every = slow_ids()
    combinations = [line.split("[", 1)[1].rstrip("]") for line in every
                    if "test_baked_project_passes_its_own_tests[" in line]
    assert combinations == ["-".join(c.values()) for c in COMBINATIONS]
    shares = [slow_ids("--slow-shard", f"{k}/4") for k in range(1, 5)]
    assert shares[1] == shard_of(every, 2, 4)
    assert sorted(sum(shares, [])) == sorted(every)
