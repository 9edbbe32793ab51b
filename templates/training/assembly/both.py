

def build_engine(config, strategy, plan, statistics):
    """The engine this run trains with, its variables under the strategy's
    scope, its model built with the training data's `statistics`: the one place
    an engine is built (train, doctor, gpu-smoke and the benchmarks all call it)."""
    learning_rate = learning_rate_for(config, plan)
    if config.loop == "fit":
        model = build_compiled_model(strategy, config, statistics, learning_rate)
        return FitEngine(strategy, model, plan.accumulate_steps)
    state = build_training_state(strategy, config, statistics, learning_rate)
    return CustomEngine(strategy, state, plan, config)
