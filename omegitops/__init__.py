"""omegitops: a GitOps reconciler for OME OMENative InferenceServices."""

__version__ = "0.1.0"
