"""What every layer reads: Instance rows and operations, the actions a plan asks for, the
InferenceReplica's stored form, budgets and durations as numbers, object ids, and what the
API server refuses in a pod. Pure values; imports only util.
"""
