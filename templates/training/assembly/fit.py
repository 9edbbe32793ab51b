

def build_engine(config, strategy, plan, statistics):
    """The engine this run trains with, its variables under the strategy's
    scope, its model built with the training data's `statistics`: the one place
    an engine is built (train, doctor, gpu-smoke and the benchmarks all call it)."""
    model = build_compiled_model(strategy, config, statistics, learning_rate_for(config, plan))
    return FitEngine(strategy, model, plan.accumulate_steps)
