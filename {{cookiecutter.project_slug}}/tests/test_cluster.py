import json

import pytest

from {{ cookiecutter.package_name }}.distribute.cluster import ClusterError, parse_tf_config, read_tf_config

TWO_WORKERS = {"worker": ["localhost:12345", "localhost:12346"]}


def tf_config(cluster=TWO_WORKERS, task_type="worker", index=0):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_valid_tf_config_is_accepted():
    config = parse_tf_config(tf_config(index=1))
    assert config["task"] == {"type": "worker", "index": 1}


def test_unset_tf_config_means_a_single_worker():
    assert read_tf_config({}) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", r"TF_CONFIG is not valid JSON"),
        ('["worker"]', r"TF_CONFIG must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), r"has no 'cluster' object"),
        (json.dumps({"cluster": TWO_WORKERS}), r"has no 'task' object"),
        (tf_config(index=2), r"task.index=2 is out of range for 2 worker task\(s\) - use 0 to 1"),
        (tf_config(index=-1), r"task.index=-1 is out of range"),
        (tf_config(index="0"), r"task.index='0' is not an integer"),
        (tf_config(task_type="ps"), r"task.type='ps' is not in the cluster"),
        (tf_config(cluster={"ps": ["a:1"], "worker": ["b:2"]}), r"unknown task type 'ps'"),
        (tf_config(cluster={"worker": ["a:1", "a:1"]}), r"lists the address 'a:1' twice"),
        (tf_config(cluster={"worker": ["nohost"]}), r"holds 'nohost', not 'host:port'"),
        (tf_config(cluster={"worker": []}), r"cluster.worker must be a non-empty list"),
    ],
)
def test_malformed_tf_config_names_the_field(text, message):
    with pytest.raises(ClusterError, match=message) as caught:
        parse_tf_config(text)
    assert "\n" not in str(caught.value)
