"""The project's exception tree. Each error prints as one line for the user."""


class OmegitopsError(Exception):
    """Base of every error the command line turns into a message and exit code 1."""


class InputError(OmegitopsError):
    """A manifest, values file or repository that cannot be used as given."""


class OperatorConfigError(InputError):
    """An invalid operator setting; stops the run before anything is touched."""


class ClusterError(OmegitopsError):
    """The cluster could not be read or written."""


class UsageError(OmegitopsError):
    """The command line asks for something that cannot be done (exit code 2)."""
