"""The validation rules, the hooks that apply them, and hostile values."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DEFAULTS, ROOT, bake, hook_error, leftovers
from cookiecutter.environment import StrictEnvironment

import rules


def options(**changes):
    values = {**DEFAULTS, **changes}
    values["project_slug"] = changes.get("project_slug", "tf-distributed-trainer")
    values["package_name"] = changes.get("package_name", "tf_distributed_trainer")
    return values


def test_defaults_are_valid():
    rules.validate(options())


def test_every_choice_in_cookiecutter_json_is_known_to_the_rules():
    context = json.loads((ROOT / "cookiecutter.json").read_text())
    for name, allowed in rules.CHOICES.items():
        assert tuple(context[name]) == allowed


@pytest.mark.parametrize("slug", ["my-trainer", "a", "abc123", "x-1-y"])
def test_good_slugs(slug):
    rules.check_slug(slug)


@pytest.mark.parametrize(
    "slug",
    [
        *("", "My-Trainer", "my_trainer", "1trainer", "-x", "x-", "a--b"),
        *("a/b", "../x", "a b", "x" * 64),
    ],
)
def test_bad_slugs(slug):
    with pytest.raises(rules.OptionError, match=r"project_slug=.* is not a valid slug - use"):
        rules.check_slug(slug)


@pytest.mark.parametrize("name", ["my_trainer", "trainer2", "tf_dist"])
def test_good_package_names(name):
    rules.check_package_name(name)


@pytest.mark.parametrize(
    "name, message",
    [
        ("My_Trainer", "is not a valid Python package name"),
        ("2fast", "is not a valid Python package name"),
        ("my-trainer", "is not a valid Python package name"),
        ("class", "is a Python keyword"),
        ("match", "is a Python keyword"),
        ("tensorflow", "would shadow the module 'tensorflow'"),
        ("keras", "would shadow the module 'keras'"),
        ("tf_keras", "would shadow the module 'tf_keras'"),
        ("numpy", "would shadow the module 'numpy'"),
        ("pytest", "would shadow the module 'pytest'"),
        ("test", "would shadow the module 'test'"),
        ("json", "would shadow the module 'json'"),
        ("logging", "would shadow the module 'logging'"),
    ],
)
def test_bad_package_names(name, message):
    with pytest.raises(rules.OptionError, match=message):
        rules.check_package_name(name)


@pytest.mark.parametrize("value", ["1", "64", "65536", " 32 "])
def test_good_batch_sizes(value):
    rules.check_batch_size(value)


@pytest.mark.parametrize("value", ["0", "-4", "abc", "3.5", "1e3", "65537", "", "0x10"])
def test_bad_batch_sizes(value):
    with pytest.raises(
        rules.OptionError,
        match=r"per_replica_batch_size=.* is not an integer from 1 to 65536 - use a whole number",
    ):
        rules.check_batch_size(value)


@pytest.mark.parametrize("value", ["a@b.co", "first.last+tag@example.org"])
def test_good_emails(value):
    rules.check_email(value)


@pytest.mark.parametrize("value", ["", "nobody", "a@b", "a @b.co", "@b.co", "a@@b.co"])
def test_bad_emails(value):
    with pytest.raises(rules.OptionError, match="author_email"):
        rules.check_email(value)


@pytest.mark.parametrize(
    "value", ["0.1.0", "1.0", "2.0.0rc1", "1.0.post2", "1.0.dev3", "1!2.0", "1.0+local.7"]
)
def test_good_versions(value):
    rules.check_version(value)


@pytest.mark.parametrize("value", ["", "one", "1.0-beta-gamma", "v", "1..0", "1.0 final"])
def test_bad_versions(value):
    with pytest.raises(rules.OptionError, match="version"):
        rules.check_version(value)


@pytest.mark.parametrize(
    "value, message",
    [
        ("two\nlines", "holds control characters"),
        ("tab\there", "holds control characters"),
        ("{{ cookiecutter.project_slug }}", "holds template syntax"),
        ("{% if x %}", "holds template syntax"),
        ("   ", "is empty"),
        ("x" * 501, "characters long - keep it under 500"),
        ("bad \ud800 surrogate", "lone surrogate"),
    ],
)
def test_bad_free_text(value, message):
    with pytest.raises(rules.OptionError, match=message):
        rules.validate(options(description=value))


@pytest.mark.parametrize(
    "value",
    ['quote " and \' here', "back\\slash\\", "ünïcödé ✓ 🚀", "<script>&amp;", "$(rm -rf /)"],
)
def test_hostile_free_text_is_accepted_as_data(value):
    rules.validate(options(description=value, author_name=value, project_name=value))


@pytest.mark.parametrize("rule", rules.REFUSED_COMBINATIONS, ids=lambda r: r["fix"])
def test_refused_combinations_name_why_and_fix(rule):
    chosen = options(**{key: values[0] for key, values in rule["when"].items()})
    with pytest.raises(rules.OptionError) as caught:
        rules.validate(chosen)
    message = str(caught.value)
    assert rule["why"] in message and rule["fix"] in message
    assert "\n" not in message


def test_unknown_choice_is_refused():
    with pytest.raises(rules.OptionError, match=r"training_loop='keras' is not one of the choices"):
        rules.validate(options(training_loop="keras"))


# --- The hook scripts themselves, rendered the way cookiecutter renders them ---


def render_hook(name, context, tmp_path):
    env = StrictEnvironment(context={"cookiecutter": context}, keep_trailing_newline=True)
    source = (ROOT / "hooks" / name).read_text()
    script = tmp_path / name
    script.write_text(env.from_string(source).render(cookiecutter=context), encoding="utf-8")
    return script


def run_hook(name, tmp_path, **changes):
    context = {
        **options(**changes),
        "_output_dir": str(tmp_path),
        "_extensions": ["local_extensions.TemplateFilters"],
    }
    sys.path.insert(0, str(ROOT))
    try:
        script = render_hook(name, context, tmp_path)
    finally:
        sys.path.remove(str(ROOT))
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(script)], cwd=project, capture_output=True, text=True
    )


def test_pre_gen_hook_accepts_the_defaults(tmp_path):
    result = run_hook("pre_gen_project.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize(
    "hostile",
    [
        '"""; import os; os.system("touch PWNED"); """',
        "'''; raise SystemExit(0); '''",
        "\\\\\\",
        '\\"}}',
        "</script>",
    ],
)
def test_pre_gen_hook_reads_values_as_data(tmp_path, hostile):
    result = run_hook("pre_gen_project.py", tmp_path, description=hostile, author_name=hostile)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.rglob("PWNED"))


def test_pre_gen_hook_error_is_one_line_first(tmp_path):
    result = run_hook("pre_gen_project.py", tmp_path, per_replica_batch_size="abc")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: per_replica_batch_size='abc' is not an integer from 1 to 65536"
        " - use a whole number such as 64"
    ]


# --- Whole bakes through cookiecutter ---


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"per_replica_batch_size": "0"}, "per_replica_batch_size='0' is not an integer"),
        ({"per_replica_batch_size": "1e3"}, "per_replica_batch_size='1e3' is not an integer"),
        ({"package_name": "keras"}, "package_name='keras' would shadow"),
        ({"author_email": "nobody"}, "author_email='nobody' is not an e-mail address"),
        ({"version": "one"}, "version='one' is not a PEP 440 version"),
        ({"launcher": "kubernetes"}, "the JobSet and TFJob manifests run worker pods"),
    ],
)
def test_refused_bake_says_why_and_writes_nothing(cookies, capfd, tmp_path, changes, message):
    result = bake(cookies, **changes)
    assert result.exit_code != 0
    first_line = hook_error(capfd).strip().splitlines()[0]
    assert first_line.startswith("error: ") and message in first_line
    assert leftovers(tmp_path) == [tmp_path / "cookies" / "bake00"]


def test_slug_with_a_path_separator_leaves_no_directory(tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(output), str(ROOT),
         "project_slug=nested/dir"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert result.stderr.splitlines()[0].startswith("error: project_slug='nested/dir'")
    deadline = time.monotonic() + 10
    while list(output.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(output.iterdir()) == []


def test_cli_refusal_prints_the_reason_first(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(tmp_path), str(ROOT),
         "launcher=kubernetes", "distribution=mirrored"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "error: launcher=kubernetes, distribution=mirrored is not supported: the JobSet and"
        " TFJob manifests run worker pods, which need MultiWorkerMirroredStrategy"
        " - use distribution=multi_worker (it also runs as a single worker)"
    )
    assert list(tmp_path.iterdir()) == []


def test_post_gen_hook_removes_files_the_options_do_not_need(cookies):
    result = bake(cookies, training_loop="custom", ci_provider="none", license="Proprietary")
    project = Path(result.project_path)
    assert not (project / "src" / "tf_distributed_trainer" / "training" / "engine_fit.py").exists()
    assert not (project / "tests" / "test_fit.py").exists()
    assert not (project / ".github").exists()
    assert not (project / "LICENSE").exists()
    assert (project / "src" / "tf_distributed_trainer" / "training" / "engine_custom.py").is_file()


def test_post_gen_hook_fails_plainly_when_a_file_is_missing(tmp_path):
    result = run_hook("post_gen_project.py", tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0].startswith("error: the generated project is incomplete:")
