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
variables, the largest difference) and repaired: every copy takes the values of
the chief's first replica, so the checkpoint and the rest of the run are one
model. `spread` (the largest difference seen before a repair) and `repairs`
go into the run's summary.
"""

import logging

import numpy as np
import tensorflow as tf

from {{ cookiecutter.package_name }}.compat import tf_variable

log = logging.getLogger(__name__)

SUM = tf.distribute.ReduceOp.SUM
# An odd multiplier (2**64 / the golden ratio, as a signed 64-bit integer) that
# scatters the checksum's weights over every bit.
SPREAD = -7046029254386353131
# The integer of the same width as each float, whose bits a checksum adds up.
BITS_OF = {
    tf.float16: tf.int16,
    tf.bfloat16: tf.int16,
    tf.float32: tf.int32,
    tf.float64: tf.int64,
}


class ReplicaSync:
    """The copies of `variables()` (the model's and the optimizer's: metric
    variables are summed on read, their copies differ by design) on the
    replicas of `strategy`."""

    def __init__(self, strategy, variables):
        self.strategy = strategy
        self.variables = variables
        self.mirrored = None  # (name, tf.Variable) of each variable with a copy per replica
        self.checksums = self.repair = None
        self.spread = 0.0
        self.repairs = 0

    def check(self):
        """Compare every copy and repair those that differ; the largest
        difference found (0.0: every copy the same)."""
        if self.mirrored is None:
            self.build()
        if not self.mirrored:
            return 0.0
        sums = self.checksums().numpy()  # [replicas, variables]
        if (sums == sums[0]).all():
            return 0.0
        differences = self.repair().numpy().max(axis=0)  # each variable's, before the repair
        apart = np.flatnonzero(differences > 0)
        largest = float(differences.max())
        named = ", ".join(f"{self.mirrored[i][0]} ({differences[i]:.2g})" for i in apart[:5])
        more = f" and {len(apart) - 5} more" if len(apart) > 5 else ""
        log.warning(
            "replica copies of %d variable(s) differed, by up to %.3g: %s%s - every copy now"
            " holds the chief's first replica's values (a non-deterministic kernel, such as"
            " an Embedding's sparse update, rounds each replica's update otherwise;"
            " --deterministic rules that out)",
            len(apart),
            largest,
            named,
            more,
        )
        self.spread = max(self.spread, largest)
        self.repairs += 1
        return largest

    def build(self):
        seen, self.mirrored = set(), []
        for variable in self.variables():
            value = tf_variable(variable)
            if id(value) in seen or not isinstance(value, tf.distribute.DistributedValues):
                continue
            seen.add(id(value))
            if value.synchronization != tf.VariableSynchronization.ON_READ:
                self.mirrored.append((variable.name, value))
        values = [value for _, value in self.mirrored]
        strategy = self.strategy

        @tf.function
        def checksums():
            # Read in a replica function, a variable gives that replica's copy.
            per_replica = strategy.run(lambda: tf.stack([checksum(v) for v in values])[None])
            return strategy.gather(per_replica, axis=0)

        def replica_repair():
            context = tf.distribute.get_replica_context()
            first = tf.equal(context.replica_id_in_sync_group, 0)
            own = [tf.convert_to_tensor(value) for value in values]
            shares = [tf.where(first, copy, tf.zeros_like(copy)) for copy in own]
            # The chief's first replica's copies, on every replica (the others add
            # zeros): one all-reduce per dtype (a batch holds one), in the same
            # order on every worker.
            chiefs = [None] * len(own)
            for dtype in sorted({copy.dtype for copy in own}, key=lambda dtype: dtype.name):
                positions = [i for i, copy in enumerate(own) if copy.dtype == dtype]
                summed = context.all_reduce(SUM, [shares[i] for i in positions])
                for position, chief in zip(positions, summed, strict=True):
                    chiefs[position] = chief
            differences = tf.stack(
                [
                    tf.reduce_max(tf.abs(tf.cast(copy, tf.float64) - tf.cast(chief, tf.float64)))
                    for copy, chief in zip(own, chiefs, strict=True)
                ]
            )
            return chiefs, differences[None]

        @tf.function
        def repair():
            chiefs, differences = strategy.run(replica_repair)
            for value, chief in zip(values, chiefs, strict=True):
                # Assigned across replicas: the same value into every local copy.
                value.assign(strategy.experimental_local_results(chief)[0])
            return strategy.gather(differences, axis=0)

        self.checksums, self.repair = checksums, repair


def checksum(value):
    """A weighted sum of the bits of every element of `value` (as integers,
    wrapping around): any element that differs changes it, and differences in
    several elements (one a rounding up, another down) do not cancel, since
    each element's weight is its own odd number."""
    flat = tf.reshape(tf.convert_to_tensor(value), [-1])
    if flat.dtype in BITS_OF:
        flat = tf.bitcast(flat, BITS_OF[flat.dtype])
    # In 64 bits: GPUs run 32-bit integer arithmetic on the host.
    flat = tf.cast(flat, tf.int64)
    odd = tf.range(tf.size(flat, out_type=tf.int64), dtype=tf.int64) * 2 + 1
    return tf.reduce_sum(flat * odd * SPREAD)
