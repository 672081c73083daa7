"""Loading, classifying and validating the manifests of a GitOps repository."""
