"""Bake every combination of the code-changing options and check each bake.

Supported combinations must bake cleanly and give a project that compiles,
parses, lints and holds exactly the files its options need; refused ones must
fail with their reason, before anything is written.
"""

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, bake, code_combinations, combination_id, hook_error, leftovers

import rules

COMBINATIONS = list(code_combinations())
# ci_provider and license change files only: spread their values over the
# combinations so each one is baked many times. tracking changes code in a
# module of its own and a few lines elsewhere: spread too (every value of every
# other option is baked with each of its values, checked below) rather than
# doubling the matrix.
for index, options in enumerate(COMBINATIONS):
    options["ci_provider"] = rules.CHOICES["ci_provider"][index % 3]
    options["license"] = rules.CHOICES["license"][index % 4]
    options["tracking"] = rules.CHOICES["tracking"][index // 3 % 2]

RUFF = [sys.executable, "-m", "ruff"]


def test_the_matrix_is_what_the_rules_say():
    assert len(COMBINATIONS) == 432
    refused = [c for c in COMBINATIONS if not rules.is_supported(c)]
    # kubernetes + mirrored, on 2 tasks x 3 loops x 2 Keras x 2 data x 3 precision.
    assert len(refused) == 2 * 3 * 2 * 2 * 3
    for option in ("ci_provider", "license", "tracking"):
        assert {c[option] for c in COMBINATIONS} == set(rules.CHOICES[option])
    supported = [c for c in COMBINATIONS if rules.is_supported(c)]
    for option in rules.CODE_OPTIONS:
        pairs = {(c[option], c["tracking"]) for c in supported}
        assert len(pairs) == len(rules.CHOICES[option]) * len(rules.CHOICES["tracking"]), option


def test_each_variant_file_includes_one_module_per_value_of_its_option():
    for path, option in rules.VARIANT_FILES.items():
        name = Path(path).relative_to("src/PKG").with_suffix("").as_posix()
        in_template = ROOT / "{{cookiecutter.project_slug}}" / path.replace(
            "src/PKG", "src/{{cookiecutter.package_name}}"
        )
        # A module per value of the option among the projects that have the file.
        has_the_file = rules.CONDITIONAL_FILES.get(path, lambda options: True)
        values = {c[option] for c in COMBINATIONS if has_the_file(c)}
        variants = {variant.stem for variant in (ROOT / "templates" / name).glob("*.py")}
        assert variants == values, path
        # The file is rendered (then removed) for a value without a module too.
        missing = " ignore missing" if values != set(rules.CHOICES[option]) else ""
        include = f'{{% include "{name}/" ~ cookiecutter.{option} ~ ".py"{missing} %}}'
        assert in_template.read_text(encoding="utf-8").endswith(include), path


def project_files(project):
    return sorted(
        str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()
    )


def package_modules(source):
    """The package's modules by their path in it ("training/controller"), without
    the __init__ files and __main__."""
    modules = {path.relative_to(source).with_suffix("").as_posix() for path in source.rglob("*.py")}
    return {name for name in modules if not name.endswith("__init__")} - {"__main__"}


def package_imports(path, package, modules):
    """The modules of `package` (of `modules`) that the module at `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):  # import package.training.controller
            named = [alias.name.removeprefix(package + ".") for alias in node.names]
            found |= {name.replace(".", "/") for name in named} & modules
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module != package and not node.module.startswith(package + "."):
            continue
        inside = node.module.removeprefix(package).lstrip(".").replace(".", "/")
        for alias in node.names:
            named = f"{inside}/{alias.name}" if inside else alias.name
            found |= {named} & modules or {inside} & modules
    return found


def check_architecture(project, package):
    """The package shows its layers: a few modules at its top, the rest in
    subpackages. ARCHITECTURE.md has a row for each module of this bake, and no
    other, in an order where each module imports only from those above it, and
    where each subpackage's rows come together (its folder is a layer: folders
    import one way, with no circle between them)."""
    architecture = (project / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `((?:\w+/)?\w+)\.py` \|", architecture, re.MULTILINE)
    source = project / "src" / package
    modules = package_modules(source)
    assert sorted(rows) == sorted(modules)
    for position, module in enumerate(rows):
        later = package_imports(source / f"{module}.py", package, modules) & set(rows[position:])
        assert not later, f"{module}.py imports {sorted(later)}, listed below it"
    layers = [row.split("/")[0] if "/" in row else row for row in rows]
    runs = [layer for at, layer in enumerate(layers) if layers[at - 1 : at] != [layer]]
    assert len(runs) == len(set(runs)), f"a folder's modules are split by others: {runs}"
    assert len(list(source.glob("*.py"))) <= 12, sorted(path.name for path in source.glob("*.py"))
    assert len([folder for folder in source.iterdir() if (folder / "__init__.py").is_file()]) >= 4


def task_interface(path):
    """The names task.py's docstring gives the framework: those named in each
    bullet's head (up to its first colon)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    bullets = re.split(r"^- ", docstring, flags=re.MULTILINE)[1:]
    heads = [bullet[: bullet.index("`:") + 1] for bullet in bullets]
    return {name for head in heads for name in re.findall(r"`(\w+)", head)}


def top_level_names(path):
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            # `A = ...` and `A, b = ...` (a head's functions, toolkit/heads.py).
            targets = [
                name
                for target in node.targets
                for name in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def task_names_used(path, package):
    """What the module at `path` takes from task.py: imported names and `task.X`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    used = {
        alias.name for node in imports if node.module == f"{package}.task" for alias in node.names
    }
    module_imported = any(
        node.module == package and "task" in {alias.name for alias in node.names}
        for node in imports
    )
    if not module_imported:
        return used  # a name `task` here is something else (distribute/cluster.py: TF_CONFIG's)
    return used | {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "task"
    }


def check_task_interface(project, package):
    """The framework reaches task.py only through the names its docstring lists,
    and task.py (and the worked example, where there is one) defines them all."""
    source = project / "src" / package
    interface = task_interface(source / "task.py")
    for path in source.rglob("*.py"):
        extra = task_names_used(path, package) - interface
        assert not extra, f"{path.relative_to(source)} uses {sorted(extra)}, not in the interface"
    tasks = [source / "task.py", *project.glob("examples/*_task.py")]
    for path in tasks:
        missing = interface - top_level_names(path)
        assert not missing, f"{path.name} lacks {sorted(missing)}"


# A README that starts small: the rest is in docs/ pages.
MAX_README_LINES = 250


def test_the_templates_readme_starts_small_and_its_links_resolve():
    readme = ROOT / "README.md"
    assert readme.read_text(encoding="utf-8").count("\n") <= MAX_README_LINES
    check_links(ROOT, [readme, *ROOT.glob("docs/*.md")])


def prose(lines):
    """(index, line) of each line outside code blocks (``` fences, indented too)."""
    fenced = False
    for index, line in enumerate(lines):
        fenced ^= line.lstrip().startswith("```")
        if not fenced:
            yield index, line


def heading_anchors(markdown):
    """The anchors GitHub gives a page's headings (lower case, punctuation out,
    spaces to hyphens)."""
    anchors = set()
    for _, line in prose(markdown.splitlines()):
        if heading := re.match(r"#+ (.*)", line):
            words = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            anchors.add(words.replace(" ", "-"))
    return anchors


def check_layout(page, text):
    """Outside code blocks: a blank line before each heading, never two in a row
    (what Jinja's whitespace control gets wrong between conditional blocks)."""
    lines = text.splitlines()
    for index, line in prose(lines):
        before = lines[index - 1] if index else "-"
        if re.match(r"#+ ", line) and index:
            assert not before.strip(), f"{page}:{index + 1}: no blank line before a heading"
        if not line.strip():
            assert before.strip(), f"{page}:{index + 1}: two blank lines"


def check_links(project, pages=None):
    """Every relative link of every Markdown file (of `pages`) leads to a file of
    the project, and a #part of it to one of that page's headings."""
    project = project.resolve()
    for page in pages or project.rglob("*.md"):
        page = page.resolve()
        text = page.read_text(encoding="utf-8")
        check_layout(page, text)
        inline = re.findall(r"\]\(([^)\s]+)[^)]*\)", text)
        for target in inline + re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.MULTILINE):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(project)} links to {target}"
            assert linked.is_file() and project in linked.parents, where
            if anchor:
                assert anchor in heading_anchors(linked.read_text(encoding="utf-8")), where


def check_project(project, options):
    context = {**options, "package_name": project.name.replace("-", "_")}
    assert project_files(project) == rules.expected_files(context)
    for path in project.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        assert not rules.UNRENDERED_RE.search(text), f"unrendered template syntax in {path}"
        assert text.strip(), f"{path} is empty"
        if path.suffix == ".py":
            compile(text, str(path), "exec")
        elif path.suffix == ".toml":
            tomllib.loads(text)
        elif path.suffix in (".yml", ".yaml"):
            yaml.safe_load(text)
        elif path.suffix == ".json":
            __import__("json").loads(text)
    check_architecture(project, context["package_name"])
    check_task_interface(project, context["package_name"])
    check_links(project)
    assert (project / "README.md").read_text(encoding="utf-8").count("\n") <= MAX_README_LINES
    # Preview's blank-line rules (E3, W391) catch what Jinja's whitespace control
    # gets wrong between conditional blocks; plain `ruff check` does not look.
    lint = subprocess.run(
        [*RUFF, "check", "--no-cache", "--preview", "--extend-select", "E3,W391",
         "--output-format", "concise", "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatted = subprocess.run(
        [*RUFF, "format", "--no-cache", "--diff", "."], cwd=project, capture_output=True, text=True
    )
    assert formatted.returncode == 0, "not `ruff format` clean:\n" + formatted.stdout[-3000:]


@pytest.mark.parametrize("options", COMBINATIONS, ids=combination_id)
def test_bake(cookies, capfd, tmp_path, options):
    result = bake(cookies, **options)
    rule = rules.refusal(options)
    if rule is None:
        assert result.exit_code == 0, result.exception
        check_project(Path(result.project_path), options)
    else:
        assert result.exit_code != 0
        first_line = hook_error(capfd).strip().splitlines()[0]
        assert first_line.startswith("error: ")
        assert rule["why"] in first_line and rule["fix"] in first_line
        assert leftovers(tmp_path) == [tmp_path / "cookies" / "bake00"]


def test_default_bake_is_the_documented_one(cookies):
    result = bake(cookies)
    assert result.exit_code == 0, result.exception
    project = Path(result.project_path)
    assert project.name == "tf-distributed-trainer"
    training = project / "src" / "tf_distributed_trainer" / "training"
    assert (training / "engine_fit.py").is_file()
    assert not (training / "engine_custom.py").exists()
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["dependencies"] == [
        "tensorflow>=2.21,<2.22",
        "tensorboard>=2.20",
        "keras>=3.8",
    ]
    assert pyproject["project"]["optional-dependencies"]["gpu"] == [
        "tensorflow[and-cuda]>=2.21,<2.22"
    ]
    assert pyproject["project"]["scripts"] == {
        "tf-distributed-trainer": "tf_distributed_trainer.cli:main"
    }


JINJA_LINE = re.compile(r"^\s*\{%-?.*-?%\}\s*$")
DEF = re.compile(r"^(\s*)(async\s+)?def ")


def jinja_tags_in_function_bodies(path):
    """The {% and {{ tags on the lines of a template module's function bodies (a
    Jinja-only line counts with the code line after it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    in_body, defs = [False] * len(lines), []
    for number, line in enumerate(lines):
        if not line.strip() or JINJA_LINE.match(line):
            continue
        indent = len(line) - len(line.lstrip())
        while defs and indent <= defs[-1]:
            defs.pop()
        in_body[number] = bool(defs)
        if match := DEF.match(line):
            defs.append(len(match.group(1)))
    following = False
    for number in reversed(range(len(lines))):
        if lines[number].strip() and not JINJA_LINE.match(lines[number]):
            following = in_body[number]
        elif JINJA_LINE.match(lines[number]):
            in_body[number] = following
    inside = [line for line, counted in zip(lines, in_body, strict=True) if counted]
    return sum(len(re.findall(r"\{%|\{\{", line)) for line in inside)


def test_options_choose_whole_functions_not_lines_inside_shared_ones():
    """Where an option changes code, it chooses a function or a file (templates/),
    not lines inside a function every bake shares: the package's function bodies
    hold 48 tags, names such as the package's included (65 by this count before
    issue 51 moved some into whole functions)."""
    package = ROOT / "{{cookiecutter.project_slug}}" / "src" / "{{cookiecutter.package_name}}"
    counts = {
        str(path.relative_to(package)): jinja_tags_in_function_bodies(path)
        for path in sorted(package.rglob("*.py"))
    }
    assert sum(counts.values()) <= 48, {name: count for name, count in counts.items() if count}


def test_the_projects_gitignore_keeps_out_its_data_and_runs_but_no_file_of_its_own(cookies):
    """`/data/` and `/runs/`, not `data/`: the package's own `data/` folder (the
    input pipeline) would be left out of the team's repository."""
    project = Path(bake(cookies, data_source="tfrecord").project_path)
    generated = project_files(project)
    for made in ("data/train-00000-of-00001.tfrecord", "runs/ckpt-1.index", "exports/1/x.pb"):
        (project / made).parent.mkdir(parents=True)
        (project / made).write_text("")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *generated, "data/", "runs/", "exports/"],
        cwd=project, capture_output=True, text=True,
    ).stdout.split()
    assert ignored == ["data/", "runs/", "exports/"]
    assert "src/tf_distributed_trainer/data/pipeline.py" in generated


def test_tf_keras_bake_depends_on_tf_keras_and_selects_it(cookies):
    result = bake(cookies, keras_package="tf_keras")
    project = Path(result.project_path)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert "tf-keras>=2.21,<2.22" in pyproject["project"]["dependencies"]
    init = (project / "src" / "tf_distributed_trainer" / "__init__.py").read_text()
    assert 'os.environ["TF_USE_LEGACY_KERAS"] = "1"' in init
    # Keras 3 is never imported: distribute/compat.py imports tf_keras as `keras` for the rest.
    package = project / "src" / "tf_distributed_trainer"
    sources = {
        path.relative_to(package).as_posix(): path.read_text() for path in package.rglob("*.py")
    }
    assert [name for name, text in sources.items()
            if re.search(r"^\s*(import keras|from keras)\b", text, re.MULTILINE)] == []
    assert "\nimport tf_keras as keras" in sources["distribute/compat.py"]


def test_only_mlflow_bakes_depend_on_mlflow_and_import_it(cookies):
    for tracking in rules.CHOICES["tracking"]:
        project = Path(bake(cookies, tracking=tracking).project_path)
        pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
        dependencies = pyproject["project"]["dependencies"]
        importing = sorted(
            path.relative_to(project).as_posix()
            for path in project.rglob("*.py")
            if re.search(r"^\s*(import|from) mlflow\b", path.read_text(), re.MULTILINE)
        )
        if tracking == "mlflow":
            assert "mlflow>=3.17,<4" in dependencies
            assert importing == [
                "src/tf_distributed_trainer/tracking/mlflow_run.py",
                "tests/test_mlflow_tracking.py",
            ]
        else:
            assert not [name for name in dependencies if name.startswith("mlflow")]
            assert importing == []
            pages = [project / "README.md", *project.glob("docs/*.md")]
            assert not [page.name for page in pages if "mlflow" in page.read_text().lower()]


@pytest.mark.parametrize("batch", ["1", "64", "65536"])
def test_batch_size_lands_in_the_code(cookies, batch):
    project = Path(bake(cookies, per_replica_batch_size=batch).project_path)
    config = (project / "src" / "tf_distributed_trainer" / "config.py").read_text()
    assert re.search(rf"per_replica_batch_size: int = setting\(\s*{int(batch)},", config)
    toml = tomllib.loads((project / "configs" / "default.toml").read_text())
    assert toml["per_replica_batch_size"] == int(batch)
