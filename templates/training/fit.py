

def build_engine(config, strategy, global_batch_size, statistics):
    """The engine this run trains with, its variables under the strategy's
    scope, its model built with the training data's `statistics`: the one place
    an engine is built (train, doctor, gpu-smoke and the benchmarks all call it)."""
    return FitEngine(strategy, build_compiled_model(strategy, config, statistics))
