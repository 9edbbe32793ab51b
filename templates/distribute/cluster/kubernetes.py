

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
    return print_tf_config(argv, "this JobSet pod", "--from-jobset", 2222, tf_config_from_jobset)


if __name__ == "__main__":
    sys.exit(main())
