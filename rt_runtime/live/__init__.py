"""The live view: the runtime's own state while it runs (jobs, per-task windows, safety level) for a viewer.

``state`` folds scheduler events into messages (pure); ``foxglove`` serves them over Foxglove's websocket."""
