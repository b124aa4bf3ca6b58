"""Tracing on this machine: the plan of what to record (recordplan), tracefs sessions (tracing),
`record` and `watch`."""
