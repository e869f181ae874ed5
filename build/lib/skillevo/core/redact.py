"""Remove credentials from anything that is stored or printed.

Two layers: literal secrets we know about (the run's API key, the credentials in this process's environment)
and patterns for secrets we do not know (Anthropic keys, GitHub tokens, bearer/authorization values,
user:password in URLs). Structured data is also redacted by key name, so a secret under `x-api-key` is
removed even if no pattern matches it, and dictionary keys are redacted like any other text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from skillevo.core.models import (
    CREDENTIAL_ENVS as SECRET_ENV,  # the credentials' names live with their reader
)

REDACTED = "[REDACTED]"

_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"(?i)\b(authorization|x-api-key|api[_-]?key)(\"?\s*[:=]\s*\"?)(bearer\s+)?[^\s\"',;]{6,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{12,}=*"),
    re.compile(r"(?i)(https?://)[^/\s:@]+:[^/\s@]+@"),
]
_SECRET_KEYS = re.compile(
    r"(?i)^(authorization|x-api-key|api[_-]?key|anthropic_api_key|anthropic_auth_token|token|access_token|"
    r"refresh_token|secret|client_secret|cookie|set-cookie|password)$"
)


def _pattern_sub(match: re.Match[str]) -> str:
    if match.re is _PATTERNS[2]:
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    if match.re is _PATTERNS[4]:
        return f"{match.group(1)}{REDACTED}@"
    return REDACTED


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(_pattern_sub, text)
    return text


def redact_obj(obj: Any, secrets: Iterable[str] = ()) -> Any:
    secrets = tuple(secrets)
    if isinstance(obj, dict):
        return {
            (redact_text(k, secrets) if isinstance(k, str) else k):
                (REDACTED if _SECRET_KEYS.match(str(k)) and isinstance(v, str) and v else redact_obj(v, secrets))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_obj(v, secrets) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    return obj


def env_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Literal credentials to redact wherever they appear: the model keys in the environment, if set."""
    environ = os.environ if environ is None else environ
    return tuple(sorted({environ[k] for k in SECRET_ENV if environ.get(k)}))


def leaks(data: bytes | str, secrets: Iterable[str] = ()) -> bool:
    """Whether text still carries a known secret or an Anthropic key after redaction (the last check before
    anything is written where a proposer or a teammate reads it)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return any(s in text for s in secrets if len(s) >= 4) or _PATTERNS[0].search(text) is not None
