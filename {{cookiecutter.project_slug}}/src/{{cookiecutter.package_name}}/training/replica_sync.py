"""Every replica's copy of the model stays one model for the whole run.

A MirroredStrategy (and a MultiWorkerMirroredStrategy) keeps a copy of each
model and optimizer variable on every replica, applies the same all-reduced
update to each copy, and never compares them again. Deterministic kernels keep
the copies bit-equal; a non-deterministic one (the scatter-based update of an
Embedding's sparse gradient, some GPU reductions) rounds one copy's update
otherwise, and from then on each replica computes its gradients on a slightly
different model, while the checkpoint keeps the first replica's copy.

Before each checkpoint the controller compares the copies on every replica of
every worker by a checksum of their bits: one number per variable and replica
is gathered, not the values. Copies that differ are logged in one line (the
variables, the largest difference) and repaired: every copy of those variables
takes the values of the chief's first replica, so the checkpoint and the rest
of the run are one model. `spread` (the largest difference seen before a
repair) and `repairs` go into the run's summary.

The moving statistics of a batch normalization layer with per-replica
statistics differ by design (each replica writes its own): they are aligned
the same way, named once with their cause, and left out of `spread`.
"""

import logging

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.distribute.compat import keras, tf_variable, variable_path

log = logging.getLogger(__name__)

SUM = tf.distribute.ReduceOp.SUM
# The integer of the same width as each float, whose bits a checksum adds up.
BITS_OF = {
    tf.float16: tf.int16,
    tf.bfloat16: tf.int16,
    tf.float32: tf.int32,
    tf.float64: tf.int64,
}
# A checksum reads a variable this many elements at a time, one piece after
# another: its temporaries (24 bytes an element) stay small beside a large
# embedding on a full GPU.
PIECE = 2**22
# The seed of the checksum's weights: the same on every replica and worker.
WEIGHTS_SEED = 48


class ReplicaSync:
    """The copies of the model's and the optimizer's variables on the replicas
    of `strategy` (metric variables are summed on read: their copies differ by
    design). They are listed at the first check, once the optimizer is built."""

    def __init__(self, strategy, model, optimizer=None):
        self.strategy = strategy
        self.model, self.optimizer = model, optimizer
        self.mirrored = None  # (name, tf.Variable) of each variable with a copy per replica
        self.per_replica_statistics = set()  # their indices: a batch norm's own statistics
        self.statistics_named = False
        self.checksums = None
        self.repairs_by_variables = {}  # the repair of each set of variables, traced once
        self.spread = 0.0
        self.repairs = 0

    def check(self):
        """Compare every copy and repair those that differ; the largest
        difference found (0.0: every copy the same)."""
        if self.strategy.num_replicas_in_sync == 1:
            return 0.0
        if self.mirrored is None:
            self.build()
        if not self.mirrored:
            return 0.0
        sums = self.checksums().numpy()  # [replicas, variables]: the same on every worker
        apart = tuple(int(i) for i in np.flatnonzero((sums != sums[0]).any(axis=0)))
        if not apart:
            return 0.0
        differences = dict(zip(apart, self.repair(apart), strict=True))
        statistics = {i: d for i, d in differences.items() if i in self.per_replica_statistics}
        drifted = {i: d for i, d in differences.items() if i not in self.per_replica_statistics}
        if statistics and not self.statistics_named:
            self.statistics_named = True
            log.warning(
                "replica copies of the moving statistics %s differed, by up to %.3g: batch"
                " normalization layer(s) %s keep per-replica statistics - build them with"
                " BatchNormalization(synchronized=True) (docs/your-model.md, 'Batch"
                " normalization');"
                " every checkpoint now gives every copy the chief's first replica's",
                self.named(statistics),
                max(statistics.values()),
                ", ".join(unsynchronized_batch_norms(self.model)),
            )
        if not drifted:
            return 0.0
        largest = max(drifted.values())
        log.warning(
            "replica copies of %d variable(s) differed, by up to %.3g: %s - every copy now"
            " holds the chief's first replica's values (a non-deterministic kernel, such as"
            " an Embedding's sparse update, rounds each replica's update otherwise;"
            " --deterministic rules that out)",
            len(drifted),
            largest,
            self.named(drifted),
        )
        self.spread = max(self.spread, largest)
        self.repairs += 1
        return largest

    def named(self, differences, shown=5):
        names = [f"{self.mirrored[i][0]} ({d:.2g})" for i, d in differences.items()]
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        return ", ".join(names[:shown]) + more

    def build(self):
        variables = [*self.model.weights, *(self.optimizer.variables if self.optimizer else [])]
        statistics = {
            id(tf_variable(weight))
            for layer in unsynchronized_batch_norm_layers(self.model)
            for weight in layer.non_trainable_weights
        }
        seen, self.mirrored = set(), []
        for variable in variables:
            value = tf_variable(variable)
            if id(value) in seen or not isinstance(value, tf.distribute.DistributedValues):
                continue
            seen.add(id(value))
            if value.synchronization != tf.VariableSynchronization.ON_READ:
                if id(value) in statistics:
                    self.per_replica_statistics.add(len(self.mirrored))
                self.mirrored.append((variable_path(variable), value))
        values = [value for _, value in self.mirrored]
        strategy = self.strategy

        def replica_checksums():
            # Read in a replica function, a variable gives that replica's copy;
            # one variable after another, so that their temporaries never add up.
            sums = []
            for value in values:
                with tf.control_dependencies(sums[-1:]):
                    sums.append(checksum(value))
            return tf.stack(sums)[None]

        @tf.function
        def checksums():
            return strategy.gather(strategy.run(replica_checksums), axis=0)

        self.checksums = checksums

    def repair(self, indices):
        """Give every copy of the variables at `indices` the chief's first
        replica's values; their largest difference from those, before."""
        if indices not in self.repairs_by_variables:
            values = [self.mirrored[i][1] for i in indices]
            self.repairs_by_variables[indices] = self.make_repair(values)
        return [float(d) for d in self.repairs_by_variables[indices]().numpy().max(axis=0)]

    def make_repair(self, values):
        strategy = self.strategy

        def chiefs_values():
            context = tf.distribute.get_replica_context()
            first = tf.equal(context.replica_id_in_sync_group, 0)
            own = [tf.convert_to_tensor(value) for value in values]
            # The chief's first replica's copies, on every replica (the others add
            # zeros): one all-reduce per dtype, in the same order on every worker.
            chiefs = [None] * len(own)
            for dtype in sorted({copy.dtype for copy in own}, key=lambda dtype: dtype.name):
                positions = [i for i, copy in enumerate(own) if copy.dtype == dtype]
                shares = [tf.where(first, own[i], tf.zeros_like(own[i])) for i in positions]
                for position, chief in zip(positions, context.all_reduce(SUM, shares), strict=True):
                    chiefs[position] = chief
            differences = [
                tf.cast(tf.reduce_max(tf.abs(copy - chief)), tf.float64)
                for copy, chief in zip(own, chiefs, strict=True)
            ]
            return chiefs, tf.stack(differences)[None]

        @tf.function
        def repair():
            chiefs, differences = strategy.run(chiefs_values)
            for value, chief in zip(values, chiefs, strict=True):
                # Each device assigns its own replica's (equal) copy of the chief's.
                strategy.extended.update(value, lambda copy, new: copy.assign(new), args=(chief,))
            return strategy.gather(differences, axis=0)

        return repair


def unsynchronized_batch_norm_layers(model):
    """The model's BatchNormalization layers with per-replica statistics."""
    found = []
    for layer in model.layers:
        if hasattr(layer, "layers"):  # a nested model
            found += unsynchronized_batch_norm_layers(layer)
        elif isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized:
            found.append(layer)
    return found


def unsynchronized_batch_norms(model):
    """Names of the model's BatchNormalization layers with per-replica statistics."""
    return [layer.name for layer in unsynchronized_batch_norm_layers(model)]


def checksum(value):
    """A weighted sum of the bits of every element of `value` (as integers,
    wrapping around), each element's weight a pseudo-random 64-bit integer of
    its position: any element that differs changes it, and differences in
    several elements (one a rounding up, others down) cancel with a chance of
    about 2**-64."""
    flat = tf.reshape(tf.convert_to_tensor(value), [-1])
    if flat.dtype in BITS_OF:
        flat = tf.bitcast(flat, BITS_OF[flat.dtype])
    total = tf.constant(0, tf.int64)
    for start in range(0, flat.shape[0], PIECE):
        with tf.control_dependencies([total]):  # one piece after another
            # In 64 bits: GPUs run 32-bit integer arithmetic on the host.
            piece = tf.cast(flat[start : start + PIECE], tf.int64)
            weights = tf.random.stateless_uniform(
                tf.shape(piece), (WEIGHTS_SEED, start), minval=None, maxval=None, dtype=tf.int64
            )
            total += tf.reduce_sum(piece * weights)
    return total
