"""Generated deployment files checked against what the real services accept:
CI files against the GitHub Actions and GitLab CI schemas (check-jsonschema,
offline), the TFJob and JobSet manifests against their CRD schemas (the Training
Operator's, kubernetes-sigs/jobset's), and the Dockerfile with hadolint. Each
check is shown to refuse a broken file."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import bake

BIN = Path(sys.executable).parent
CI_FILES = {
    "github": (".github/workflows/ci.yml", "vendor.github-workflows"),
    "gitlab": (".gitlab-ci.yml", "vendor.gitlab-ci"),
}
# The steps of the CI files differ with these options.
VARIANTS = [
    dict(distribution="mirrored", data_source="synthetic"),
    dict(distribution="mirrored", data_source="tfrecord"),
    dict(distribution="multi_worker", data_source="synthetic", training_loop="custom"),
    dict(distribution="multi_worker", data_source="tfrecord", training_loop="custom"),
]


def variant_id(options):
    return "-".join(options.values())


def tool(name):
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found, f"{name} is missing: make test installs it from requirements-dev.txt"
    return found


def check_jsonschema(schema, path):
    return subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("provider", sorted(CI_FILES))
@pytest.mark.parametrize("options", VARIANTS, ids=variant_id)
def test_ci_file_is_valid_for_its_service(cookies, provider, options):
    project = Path(bake(cookies, ci_provider=provider, **options).project_path)
    path, schema = CI_FILES[provider]
    result = check_jsonschema(schema, project / path)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (project / path).read_text(encoding="utf-8")
    assert " doctor" in text and "gpu-smoke --cpu-replicas 2" in text


@pytest.mark.parametrize("provider", sorted(CI_FILES))
def test_ci_schema_check_refuses_a_broken_file(cookies, tmp_path, provider):
    project = Path(bake(cookies, ci_provider=provider).project_path)
    path, schema = CI_FILES[provider]
    document = yaml.safe_load((project / path).read_text(encoding="utf-8"))
    if provider == "github":
        document["jobs"]["test"]["runs-on"] = {"not": "a runner"}
    else:
        document["test"]["script"] = {"not": "a script"}
    broken = tmp_path / Path(path).name
    broken.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert check_jsonschema(schema, broken).returncode != 0


@pytest.mark.parametrize(
    "options",
    [
        dict(training_loop="custom", keras_package="keras3", data_source="synthetic"),
        dict(training_loop="both", keras_package="tf_keras", data_source="tfrecord"),
    ],
    ids=variant_id,
)
def test_tfjob_jobset_and_dockerfile_are_valid(cookies, options):
    project = Path(
        bake(cookies, distribution="multi_worker", launcher="kubernetes", **options).project_path
    )
    manifest = yaml.safe_load((project / "k8s" / "tfjob.yaml").read_text(encoding="utf-8"))
    schema = json.loads((project / "k8s" / "tfjob.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(manifest, schema)
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, schema)
    jobset = yaml.safe_load((project / "k8s" / "jobset.yaml").read_text(encoding="utf-8"))
    schema = json.loads((project / "k8s" / "jobset.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(jobset, schema)
    jobset["spec"]["replicatedJobs"][0]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(jobset, schema)
    lint = subprocess.run(
        [tool("hadolint"), str(project / "Dockerfile")], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_hadolint_refuses_a_bad_dockerfile(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM tensorflow/tensorflow:latest\nRUN cd /app && pip install x\n")
    assert subprocess.run([tool("hadolint"), str(dockerfile)], capture_output=True).returncode != 0
