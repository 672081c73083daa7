"""The git side of a run: get the repository, commit the report, push it.

- ``repo``: ``checkout`` a folder in place or a URL cloned shallow (removed after the run);
- ``commit``: commit the report folder only, only when its content changed,
  with a message that says what moved;
- ``push``: push without force; when the remote moved, rebase (re-rendering the
  report folder on conflict) and retry a bounded number of times;
- ``credentials``: where credentials come from, how git gets them, and
  ``redact``/``scrub`` that keep them out of every message, log and report.
"""

from omegitops.gitops.commit import DEFAULT_AUTHOR, Author, ReportCommit, commit_report
from omegitops.gitops.credentials import redact
from omegitops.gitops.gitcmd import GitError
from omegitops.gitops.push import PushError, push_report
from omegitops.gitops.repo import Checkout, checkout, report_path

__all__ = ["DEFAULT_AUTHOR", "Author", "Checkout", "GitError", "PushError", "ReportCommit",
           "checkout", "commit_report", "push_report", "redact", "report_path"]
