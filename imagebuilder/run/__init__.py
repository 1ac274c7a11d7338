"""The run wing: the machinery one run of composed steps shares (its context, schedule, display, logs, lock,
loopback services, hand-off between machines) and the helpers several steps use. It imports no step."""
