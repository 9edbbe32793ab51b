"""The run: the recipe, the engines that run steps, the controller that runs
them in global steps, and what keeps a long run whole (checkpoints, evaluation,
the watchdog, the attempts, the replicas' agreement)."""
