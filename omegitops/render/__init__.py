"""From a repository's manifests to the objects omegitops builds, and back: resolution of
each component's lifecycle, the operator's settings, pod templates and revisions, names,
Services, and reading the pods it built by their labels. Pure.
"""
