

# What a pod of k8s/jobset.yaml knows about its place: the JobSet's labels (given
# to the container by the downward API), the worker count, and the completion
# index Kubernetes gives each pod of an Indexed Job.
JOBSET_VARIABLES = ("JOBSET_NAME", "REPLICATED_JOB_NAME", "JOB_INDEX", "WORKERS")
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"


def jobset_variable(environ, name):
    try:
        return environ[name]
    except KeyError:
        raise ClusterError(
            f"cannot read the JobSet pod: {name} is not set - run this in a pod of"
            " k8s/jobset.yaml (a TFJob's operator writes TF_CONFIG itself)"
        ) from None


def tf_config_from_jobset(port, environ=None):
    """TF_CONFIG for this pod of the JobSet: one worker per pod of its Job, in
    completion-index order, each at the host name JobSet gives it with
    network.enableDNSHostnames (<jobset>-<replicated job>-<job index>-<pod
    index>, in the subdomain named after the JobSet). Pure Python, before
    TensorFlow starts: every pod computes the same list from the same labels."""
    environ = os.environ if environ is None else environ
    values = {name: jobset_variable(environ, name) for name in (*JOBSET_VARIABLES, INDEX_VARIABLE)}
    for name in ("WORKERS", "JOB_INDEX", INDEX_VARIABLE):
        if not values[name].isdigit():
            raise ClusterError(
                f"{name}={values[name]!r} is not a whole number - check k8s/jobset.yaml"
            )
    workers, index = int(values["WORKERS"]), int(values[INDEX_VARIABLE])
    if not 0 <= index < workers:
        raise ClusterError(
            f"{INDEX_VARIABLE}={index} is not one of the {workers} workers - set the WORKERS"
            " variable to the Job's completions (make jobset WORKERS=N sets both)"
        )
    jobset = values["JOBSET_NAME"]
    job = f"{jobset}-{values['REPLICATED_JOB_NAME']}-{int(values['JOB_INDEX'])}"
    hosts = [f"{job}-{pod}.{jobset}:{port}" for pod in range(workers)]
    config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    return parse_tf_config(json.dumps(config))


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="print TF_CONFIG for this JobSet pod")
    parser.add_argument("--from-jobset", action="store_true", required=True)
    parser.add_argument("--port", type=int, default=2222)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(tf_config_from_jobset(args.port)))
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
