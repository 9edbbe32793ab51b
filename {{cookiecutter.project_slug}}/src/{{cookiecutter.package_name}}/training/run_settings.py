"""The settings a run was started with, kept in its model directory.

A rerun into the same directory resumes that run. A setting that defines what
the run trains (the optimizer, the learning rate and its schedule, the seed,
gradient accumulation, clipping, the loop) changed on the way makes it another
run, which is refused unless --resume-with-changes says so; any other change is
said, one line each. The global batch and the workers fix the data stream, and
checkpointing.Progress refuses a change of those.
"""

import dataclasses
import json
import logging
import os

import tensorflow as tf

from {{ cookiecutter.package_name }} import write_atomically
from {{ cookiecutter.package_name }}.training.checkpointing import CheckpointError
from {{ cookiecutter.package_name }}.training.optimizer import scaling_rule

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
# Changed on resume, these make the run something other than its resumption.
DEFINING = (
    "optimizer",
    "learning_rate",
    "reference_batch_size",
    "learning_rate_scaling",
    "warmup_steps",
    "lr_schedule",
    "momentum",
    "nesterov",
    "weight_decay",
    "clip_norm",
    "ema_decay",
    "seed",
    "accumulate_steps",
    "loop",
)
# Not compared: where this attempt writes, and how it is told to resume.
NOT_COMPARED = ("model_dir", "summary_json", "cpu_replicas", "resume_with_changes")


def flag(name):
    return "--" + name.replace("_", "-")


@dataclasses.dataclass
class Change:
    name: str
    saved: object
    now: object

    def __str__(self):
        return f"{flag(self.name)} {self.saved} -> {self.now}"


class RunSettings:
    """`config`'s settings and the run's length in optimizer steps, compared with
    and kept in MODEL_DIR/settings.json."""

    def __init__(self, config, model_dir, total_steps):
        self.config = config
        self.path = os.path.join(model_dir, SETTINGS_FILE)
        self.values = {
            name: value
            for name, value in dataclasses.asdict(config).items()
            if name not in NOT_COMPARED
        }
        # The rule in force: the optimizer's by default, the same as naming it.
        self.values["learning_rate_scaling"] = scaling_rule(config)
        self.total_steps = total_steps

    def saved(self):
        """The settings the run in the directory was started with (None: none kept)."""
        if not tf.io.gfile.exists(self.path):
            return None
        with tf.io.gfile.GFile(self.path) as handle:
            return json.load(handle)

    def changes(self, saved):
        """Every compared setting whose value differs from `saved`'s (settings a
        later version added, absent from `saved`, are not changes)."""
        kept = saved["settings"]
        return [
            Change(name, kept[name], value)
            for name, value in self.values.items()
            if name in kept and kept[name] != value
        ]

    def check_resumption(self):
        """Before a restore: refuse a resumption whose defining settings changed
        (unless --resume-with-changes), and say every other change."""
        saved = self.saved()
        if saved is None:
            return
        changes = self.changes(saved)
        defining = [change for change in changes if change.name in DEFINING]
        if defining and not self.config.resume_with_changes:
            raise CheckpointError(
                f"the run in {os.path.dirname(self.path)} was started with other settings"
                f" ({', '.join(map(str, defining))}): resumed, it would be another run -"
                " resume with the settings it was started with (its settings.json),"
                " pass --resume-with-changes to go on with these, or train into a new"
                " --model-dir"
            )
        for change in changes:
            log.warning("changed since the run started: %s%s", change, self.effect(change, saved))

    def effect(self, change, saved):
        """What a change does to the rest of the run, for its log line."""
        if change.name == "epochs":
            return (
                f": the run now ends at optimizer step {self.total_steps}, not"
                f" {saved['total_steps']}, and its warmup and learning-rate schedule"
                " follow the new length"
            )
        if change.name in DEFINING:
            return " (--resume-with-changes)"
        return ""

    def keep(self):
        """Save these as the run's settings (the chief, when the run starts or
        resumes): the next resumption is compared with them."""
        record = {"settings": self.values, "total_steps": self.total_steps}
        write_atomically(self.path, json.dumps(record, indent=2, sort_keys=True) + "\n")
