"""Nodes, kube-scheduler's fit and the sizing of a cluster to a fleet; pure. The simulated
cluster schedules with it, validation and the plan size with it.
"""
