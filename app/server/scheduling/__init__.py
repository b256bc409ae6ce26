"""Scheduling: which models are loaded in which runner processes, the service's shared state and
the steps every route takes, and the service's side of the runner protocol."""
