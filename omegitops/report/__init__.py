"""The status report: build it from the cluster, check it against its schema, render it
(Jinja2), and the read-side views the commands print.
"""
