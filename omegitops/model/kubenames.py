"""Kubernetes' name rules (k8s.io/apimachinery/pkg/util/validation), as values.

Object names, hostnames, label keys and values: what the API server refuses. The
names omegitops derives are checked against them (``render.names``), and so are the
pods the simulated API server admits (``model.podrules``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


# eq=False: each rule is one module constant, so identity is equality, and a
# DerivedName hashes its rule at C speed (validation dedupes thousands of names).
@dataclass(frozen=True, eq=False)
class Rule:
    """One of Kubernetes' name rules (k8s.io/apimachinery/pkg/util/validation)."""

    title: str
    limit: int
    pattern: re.Pattern[str]
    form: str  # what the pattern asks, for a message

    def allows(self, value: str) -> bool:
        return len(value) <= self.limit and bool(self.pattern.match(value))


DNS1123_SUBDOMAIN = Rule(
    "a DNS-1123 subdomain", 253,
    re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
    "must hold only lower-case letters, digits, '-' and '.', and start and end with a "
    "letter or digit")
DNS1123_LABEL = Rule(
    "a DNS-1123 label", 63, re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
    "must hold only lower-case letters, digits and '-', and start and end with a letter or "
    "digit")
DNS1035_LABEL = Rule(
    "a DNS-1035 label", 63, re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$"),
    "must start with a letter and hold only lower-case letters, digits and '-'")
LABEL_VALUE = Rule(
    "a label value", 63, re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"),
    "must hold only letters, digits, '-', '_' and '.', and start and end with a letter or "
    "digit")

# A label or annotation key: an optional DNS-1123 subdomain prefix of at most 253
# characters and "/", then a name of at most 63 (IsQualifiedName).
LABEL_KEY = Rule(
    "a label key", 253 + 1 + 63,
    re.compile(r"^(?:(?=[^/]{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*"
               r"[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"),
    "must be a name of at most 63 letters, digits, '-', '_' and '.', starting and ending "
    "with a letter or digit, after an optional DNS subdomain prefix and '/'")
ANNOTATION_KEY = Rule("an annotation key", LABEL_KEY.limit, LABEL_KEY.pattern,
                      LABEL_KEY.form)
