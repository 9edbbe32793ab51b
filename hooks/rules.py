"""The template's rules: which option values and combinations are accepted, and
which files each combination generates.

This is the one place the hooks and the tests read. It must stay stdlib-only:
cookiecutter runs hooks as temporary copies in a subprocess where only the
standard library is guaranteed.
"""

import hashlib
import itertools
import keyword
import re
import sys
import tempfile
from pathlib import Path

CHOICES = {
    "task": ("tabular", "image"),
    "training_loop": ("fit", "custom", "both"),
    "distribution": ("mirrored", "multi_worker"),
    "keras_package": ("keras3", "tf_keras"),
    "data_source": ("synthetic", "tfrecord"),
    "mixed_precision": ("no", "float16", "bfloat16"),
    "launcher": ("none", "slurm", "kubernetes"),
    "tracking": ("tensorboard", "mlflow"),
    "ci_provider": ("github", "gitlab", "none"),
    "license": ("MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary"),
}

# Options whose values change the generated code (the rest change files only).
CODE_OPTIONS = (
    "task",
    "training_loop",
    "distribution",
    "keras_package",
    "data_source",
    "mixed_precision",
    "launcher",
)

# Each refused combination: the option values that trigger it, why, and the fix.
# (Keras 3 model.fit under MultiWorkerMirroredStrategy, keras-team/keras#20585, is
# not refused: the generated fit engine runs train_step in its own step loop, which
# works there; each such project tests it on 2 workers against 2 replicas.)
REFUSED_COMBINATIONS = (
    {
        "when": {
            "launcher": ("kubernetes",),
            "distribution": ("mirrored",),
        },
        "why": (
            "the JobSet and TFJob manifests run worker pods, which need"
            " MultiWorkerMirroredStrategy"
        ),
        "fix": "use distribution=multi_worker (it also runs as a single worker)",
    },
)

# Names a generated package must not take: they would shadow an import the
# project or its tests rely on.
SHADOWED_NAMES = frozenset(
    {
        "tensorflow",
        "tf",
        "keras",
        "tf_keras",
        "numpy",
        "np",
        "pytest",
        "test",
        "tests",
        "setuptools",
        "pip",
        "h5py",
        "absl",
        "google",
        "tensorboard",
        "ml_dtypes",
        "jsonschema",
        "yaml",
        "packaging",
        "src",
    }
) | frozenset(sys.stdlib_module_names)

SLUG_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
PACKAGE_RE = re.compile(r"^[a-z][a-z0-9_]*$")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# PEP 440 public and local versions (the canonical regex from the PEP's appendix).
VERSION_RE = re.compile(
    r"""^\s*v?
    (?:(?:[0-9]+)!)?
    [0-9]+(?:\.[0-9]+)*
    (?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?
    (?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?
    (?:[-_.]?dev[-_.]?[0-9]*)?
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
# Template syntax that should never survive rendering into a generated file.
UNRENDERED_RE = re.compile(r"\{\{\s*cookiecutter|\{%-?\s|\{#")
BATCH_RE = re.compile(r"^[0-9]+$")
MAX_BATCH = 65536
MAX_SLUG = 63  # a DNS label: the slug names Kubernetes objects too
MAX_TEXT = 500
TEXT_OPTIONS = ("project_name", "description", "author_name", "author_email", "version")


class OptionError(ValueError):
    """A bad option value; str() is the one-line message shown to the user."""


def _check_text(name, value):
    if not isinstance(value, str):
        raise OptionError(f"{name} must be text, got {value!r} - pass a string")
    if not value.strip():
        raise OptionError(f"{name} is empty - give it a value")
    if len(value) > MAX_TEXT:
        raise OptionError(
            f"{name} is {len(value)} characters long - keep it under {MAX_TEXT}"
        )
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        raise OptionError(f"{name} holds invalid unicode (a lone surrogate) - remove it")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise OptionError(
            f"{name}={value!r} holds control characters (newline, tab, ...)"
            " - use one line of plain text"
        )
    if "{{" in value or "{%" in value or "{#" in value:
        raise OptionError(
            f"{name}={value!r} holds template syntax ({{{{, {{% or {{#) - remove it"
        )


def check_slug(slug):
    if not isinstance(slug, str) or not SLUG_RE.match(slug) or len(slug) > MAX_SLUG:
        raise OptionError(
            f"project_slug={slug!r} is not a valid slug - use lower-case letters,"
            f" digits and single hyphens, starting with a letter, at most {MAX_SLUG}"
            " characters (for example my-trainer)"
        )


def check_package_name(name):
    if not isinstance(name, str) or not PACKAGE_RE.match(name):
        raise OptionError(
            f"package_name={name!r} is not a valid Python package name - use"
            " lower-case letters, digits and underscores, starting with a letter"
            " (for example my_trainer)"
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise OptionError(
            f"package_name={name!r} is a Python keyword - choose another name"
        )
    if name in SHADOWED_NAMES:
        raise OptionError(
            f"package_name={name!r} would shadow the module {name!r} that the"
            " project or Python itself imports - choose another name (for example"
            f" {name}_trainer)"
        )


def check_batch_size(value):
    text = str(value).strip()
    if not BATCH_RE.match(text) or not 1 <= int(text) <= MAX_BATCH:
        raise OptionError(
            f"per_replica_batch_size={value!r} is not an integer from 1 to"
            f" {MAX_BATCH} - use a whole number such as 64"
        )


def check_email(value):
    _check_text("author_email", value)
    if not EMAIL_RE.match(value):
        raise OptionError(
            f"author_email={value!r} is not an e-mail address - use the form"
            " name@example.com"
        )


def check_version(value):
    _check_text("version", value)
    if not VERSION_RE.match(value):
        raise OptionError(
            f"version={value!r} is not a PEP 440 version - use a version such as 0.1.0"
        )


def check_choices(options):
    for name, allowed in CHOICES.items():
        value = options.get(name)
        if value not in allowed:
            raise OptionError(
                f"{name}={value!r} is not one of the choices - use one of: "
                + ", ".join(allowed)
            )


def refusal(options):
    """The refused combination `options` falls into, or None if supported."""
    for rule in REFUSED_COMBINATIONS:
        if all(options.get(key) in values for key, values in rule["when"].items()):
            return rule
    return None


def check_combination(options):
    rule = refusal(options)
    if rule is not None:
        chosen = ", ".join(f"{key}={options[key]}" for key in rule["when"])
        raise OptionError(f"{chosen} is not supported: {rule['why']} - {rule['fix']}")


# The slug cookiecutter.json derives from a project_name that gives no usable slug:
# none (no letter or digit: cookiecutter would write into the output directory
# itself) or one over 63 characters (too long for Kubernetes, or for a file name).
NO_SLUG = "cannot-slugify-project-name"


def check_sluggable_name(options):
    if options.get("project_slug") == NO_SLUG:
        raise OptionError(
            f"project_name={options.get('project_name')!r} gives no project slug of"
            " 1 to 63 characters - use a name such as 'Image Trainer', or pass"
            " project_slug=image-trainer"
        )


def validate(options):
    """Raise OptionError with a one-line message for the first bad value."""
    for name in ("project_name", "description", "author_name"):
        _check_text(name, options.get(name))
    check_sluggable_name(options)
    check_email(options.get("author_email"))
    check_version(options.get("version"))
    check_slug(options.get("project_slug"))
    check_package_name(options.get("package_name"))
    check_batch_size(options.get("per_replica_batch_size"))
    check_choices(options)
    check_combination(options)


def is_supported(options):
    return refusal(options) is None


def code_combinations():
    """Every combination of the options that change the generated code (refused
    ones included: filter with is_supported)."""
    for values in itertools.product(*(CHOICES[name] for name in CODE_OPTIONS)):
        yield dict(zip(CODE_OPTIONS, values, strict=True))


# --- The generated file set --------------------------------------------------

# Files generated only for some options: path (inside the project, with the
# package directory written as "src/PKG") -> predicate on the options.
CONDITIONAL_FILES = {
    "src/PKG/training/engine_fit.py": lambda o: o["training_loop"] in ("fit", "both"),
    "src/PKG/training/engine_custom.py": lambda o: o["training_loop"] in ("custom", "both"),
    "tests/test_fit.py": lambda o: o["training_loop"] in ("fit", "both"),
    "tests/test_custom_loop.py": lambda o: o["training_loop"] in ("custom", "both"),
    "tests/test_loss_scaling.py": lambda o: o["mixed_precision"] == "float16",
    "src/PKG/distribute/cluster.py": lambda o: o["distribution"] == "multi_worker",
    "tests/test_cluster.py": lambda o: o["distribution"] == "multi_worker",
    "src/PKG/distribute/launch.py": lambda o: o["distribution"] == "multi_worker",
    "tests/test_launch.py": lambda o: o["distribution"] == "multi_worker",
    "tests/test_faults.py": lambda o: o["distribution"] == "multi_worker",
    "tests/test_randomness_on_workers.py": lambda o: o["distribution"] == "multi_worker",
    "tests/test_replica_sync_on_workers.py": lambda o: o["distribution"] == "multi_worker",
    "src/PKG/distribute/precision.py": lambda o: o["mixed_precision"] != "no",
    "src/PKG/toolkit/image_ops.py": lambda o: o["task"] == "image",
    "examples/token_task.py": lambda o: o["task"] == "tabular",
    "examples/regression_task.py": lambda o: o["task"] == "tabular",
    "examples/multilabel_task.py": lambda o: o["task"] == "tabular",
    "examples/mixed_inputs_task.py": lambda o: o["task"] == "tabular",
    "examples/text_task.py": lambda o: o["task"] == "tabular",
    "examples/backbone_task.py": lambda o: o["task"] == "image",
    "src/PKG/tracking/mlflow_run.py": lambda o: o["tracking"] == "mlflow",
    "tests/test_mlflow_tracking.py": lambda o: o["tracking"] == "mlflow",
    "src/PKG/data/tfrecords.py": lambda o: o["data_source"] == "tfrecord",
    "src/PKG/data/manifest.py": lambda o: o["data_source"] == "tfrecord",
    "src/PKG/data/importing.py": lambda o: o["data_source"] == "tfrecord",
    "src/PKG/data/commands.py": lambda o: o["data_source"] == "tfrecord",
    "tests/test_importing.py": lambda o: o["data_source"] == "tfrecord",
    "tests/test_tfrecords.py": lambda o: o["data_source"] == "tfrecord",
    "tests/test_manifest.py": lambda o: o["data_source"] == "tfrecord",
    "slurm/train.sbatch": lambda o: o["launcher"] == "slurm",
    "slurm/README.md": lambda o: o["launcher"] == "slurm",
    "tests/test_slurm.py": lambda o: o["launcher"] == "slurm",
    "tests/test_slurm_cluster.py": lambda o: o["launcher"] == "slurm",
    "k8s/tfjob.yaml": lambda o: o["launcher"] == "kubernetes",
    "k8s/tfjob.schema.json": lambda o: o["launcher"] == "kubernetes",
    "k8s/jobset.yaml": lambda o: o["launcher"] == "kubernetes",
    "k8s/jobset.schema.json": lambda o: o["launcher"] == "kubernetes",
    "tests/test_kubernetes.py": lambda o: o["launcher"] == "kubernetes",
    "Dockerfile": lambda o: o["launcher"] == "kubernetes",
    ".dockerignore": lambda o: o["launcher"] == "kubernetes",
    ".github/workflows/ci.yml": lambda o: o["ci_provider"] == "github",
    ".gitlab-ci.yml": lambda o: o["ci_provider"] == "gitlab",
    "LICENSE": lambda o: o["license"] != "Proprietary",
}

# Files whose code one option chooses: path -> that option. The file in the
# template ends by including templates/<its name>/<the option's value>.py (after
# the code every value shares), so each variant is whole functions, not lines
# inside shared ones.
VARIANT_FILES = {
    "src/PKG/data/sources.py": "data_source",
    "src/PKG/task.py": "task",
    "src/PKG/distribute/compat.py": "keras_package",
    "src/PKG/training/lamb.py": "keras_package",
    "src/PKG/distribute/strategy.py": "distribution",
    "src/PKG/data/commands.py": "task",
    "src/PKG/distribute/cluster.py": "launcher",
    "src/PKG/cli.py": "distribution",
    "src/PKG/checks/doctor.py": "distribution",
    "src/PKG/checks/gpu_smoke.py": "mixed_precision",
    "src/PKG/distribute/precision.py": "mixed_precision",
    "src/PKG/data/manifest.py": "task",
    "src/PKG/training/checkpointing.py": "distribution",
    "src/PKG/training/assembly.py": "training_loop",
    "src/PKG/data/importing.py": "task",
    "src/PKG/tracking/tracker.py": "tracking",
}

ALWAYS_FILES = (
    ".gitignore",
    ".pre-commit-config.yaml",
    "README.md",
    "ARCHITECTURE.md",
    "docs/training.md",
    "docs/flags.md",
    "docs/your-model.md",
    "docs/data.md",
    "docs/clusters.md",
    "docs/tracking.md",
    "docs/checks.md",
    "docs/design.md",
    "pyproject.toml",
    "Makefile",
    "configs/default.toml",
    "src/PKG/__init__.py",
    "src/PKG/__main__.py",
    "src/PKG/cli.py",
    "src/PKG/arguments.py",
    "src/PKG/config.py",
    "src/PKG/task.py",
    "src/PKG/export.py",
    "src/PKG/progress.py",
    "src/PKG/distribute/__init__.py",
    "src/PKG/distribute/startup.py",
    "src/PKG/distribute/preemption.py",
    "src/PKG/distribute/strategy.py",
    "src/PKG/distribute/compat.py",
    "src/PKG/toolkit/__init__.py",
    "src/PKG/toolkit/features.py",
    "src/PKG/toolkit/heads.py",
    "src/PKG/toolkit/moments.py",
    "src/PKG/data/__init__.py",
    "src/PKG/data/pipeline.py",
    "src/PKG/data/sources.py",
    "src/PKG/data/record_format.py",
    "src/PKG/data/statistics.py",
    "src/PKG/tracking/__init__.py",
    "src/PKG/tracking/tracker.py",
    "src/PKG/training/__init__.py",
    "src/PKG/training/optimizer.py",
    "src/PKG/training/lamb.py",
    "src/PKG/training/accumulation.py",
    "src/PKG/training/checkpointing.py",
    "src/PKG/training/run_settings.py",
    "src/PKG/training/evaluation.py",
    "src/PKG/training/batch_norm_check.py",
    "src/PKG/training/watchdog.py",
    "src/PKG/training/attempts.py",
    "src/PKG/training/replica_sync.py",
    "src/PKG/training/controller.py",
    "src/PKG/training/assembly.py",
    "src/PKG/checks/__init__.py",
    "src/PKG/checks/report.py",
    "src/PKG/checks/probe.py",
    "src/PKG/checks/doctor.py",
    "src/PKG/checks/gpu_smoke.py",
    "src/PKG/checks/task_contract.py",
    "tests/conftest.py",
    "tests/test_doctor.py",
    "tests/test_gpu_smoke.py",
    "tests/test_config.py",
    "tests/test_data.py",
    "tests/test_features.py",
    "tests/test_heads.py",
    "tests/test_progress.py",
    "tests/test_sharding.py",
    "tests/test_strategy.py",
    "tests/test_randomness.py",
    "tests/test_recipe.py",
    "tests/test_statistics.py",
    "tests/test_batch_norm_check.py",
    "tests/test_cli.py",
    "tests/test_help.py",
    "tests/test_resume.py",
    "tests/test_run_settings.py",
    "tests/test_controller.py",
    "tests/test_attempts.py",
    "tests/test_replica_sync.py",
    "tests/test_evaluation.py",
    "tests/test_preflight.py",
    "tests/test_export.py",
)


def _real_path(path, options):
    return path.replace("PKG", options["package_name"], 1) if path.startswith(
        "src/PKG/"
    ) else path


def expected_files(options):
    """Every file (relative path) the project for `options` must contain."""
    paths = list(ALWAYS_FILES)
    paths += [path for path, wanted in CONDITIONAL_FILES.items() if wanted(options)]
    return sorted(_real_path(path, options) for path in paths)


def unneeded_files(options):
    """Files the template holds that the project for `options` does not need."""
    return sorted(
        _real_path(path, options)
        for path, wanted in CONDITIONAL_FILES.items()
        if not wanted(options)
    )


# --- Baking into a directory that already exists ------------------------------
# With --overwrite-if-exists or --skip-if-file-exists, the project directory may
# hold the user's files. The pre-gen hook records them; the post-gen hook then
# never removes or judges them.


def snapshot_file(project_dir):
    """Where the pre-gen hook records what `project_dir` held before baking."""
    digest = hashlib.sha256(str(Path(project_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"cookiecutter-tf-distributed-{digest}.json"


def existing_paths(project_dir):
    """{relative path: modification time in ns (None for a directory)} under it."""
    project = Path(project_dir)
    found = {}
    for path in project.rglob("*"):
        relative = path.relative_to(project).as_posix()
        found[relative] = None if path.is_dir() else path.stat().st_mtime_ns
    return found
