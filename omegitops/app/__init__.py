"""The imperative shell: observe the cluster, plan every component, apply; one pass, the
passes until idle (polled or on watches), shards, and the refusal to prune.
"""
