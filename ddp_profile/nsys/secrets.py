"""What ``scrub`` treats as private text, and the row function that rewrites it. Standard library only (the
scrubber runs on GPU machines right after ``nsys export``).

Secret shapes (the documented list; docs/privacy.md and ``tests/nsys/test_scrub_secrets.py`` use it):

* tokens and keys: ``hf_``, ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_``, ``glpat-``, ``sk-``,
  ``sk_live_``/``rk_live_``, ``xox[abpr]-``, ``xapp-``, ``AKIA``/``ASIA`` (AWS key ids), ``AIza`` (Google),
  ``ya29.`` (Google OAuth), ``npm_``, ``pypi-``, ``wandb_``, JSON web tokens (``eyJ...``), PEM private keys
  -> ``<secret>``;
* a value after a secret-named flag or assignment (``--token X``, ``--hf-token=X``, ``api_key: X``,
  ``password=X``; names holding token, secret, password, passwd, api-key, access-key, auth, credential)
  -> ``<secret>``;
* environment assignments in a command line (``env WANDB_API_KEY=... python3``: an upper-case
  ``NAME=value`` word) -> ``NAME=<env>``;
* credentials in URLs (``https://user:password@host/``, ``redis://:password@host``, ``https://token@host``,
  percent-encoded or not) -> ``https://<user>:<secret>@host/`` (a user alone: ``<secret>@``); secret-named
  query parameters (``?password=X``, ``&X-Amz-Signature=X``, ``&X-Amz-Credential=X``, ``?sig=X``, ``?key=X``,
  ``&access_token=X``) -> ``name=<secret>``; in any text or BLOB column, a ``--flag=URL`` or a JSON string;
* absolute paths -> their last component (a home folder -> ``<path>``); host names -> ``host-<8 hex>``;
  user names -> ``<user>``.

Text the analysis matches on is never rewritten: a user or host name that is a word of the harness's NVTX
names (``ddp_profile``, ``step``, ``allreduce``, ...) or of NCCL kernel names (``Sum``, ``f32``, ...) is not
replaced as a word (a user ``ddp_profile`` under ``/scratch/ddp_profile`` would otherwise turn the harness's
domain into ``<user>``); their paths still are.
"""

from __future__ import annotations

import hashlib
import re

from ddp_profile import nvtx_names as nn
from ddp_profile.nsys import names as nccl_names

_SEG = r"[^\s/\\'\"=:;,()\[\]{}<>|`]+"
PATH_RE = re.compile(rf"(?<![\w.~\-])(?:~|[A-Za-z]:)?(?:/{_SEG})+/?|(?<![\w.])[A-Za-z]:(?:\\{_SEG})+")
HOME_RE = re.compile(r"^(?:/home|/Users|/users|/u|/scratch|/data|/mnt/home)/([^/]+)")
SECRET_RE = re.compile(  # no \b before: a token joined by "_" (triton_poi_fused_<token>_0) is found too
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{8,}|github_pat_\w{8,}|glpat-[A-Za-z0-9_\-]{8,}"
    r"|sk-[A-Za-z0-9_\-]{8,}|[sr]k_live_[A-Za-z0-9]{8,}|xox[abpr]-[A-Za-z0-9\-]{8,}|xapp-[A-Za-z0-9\-]{8,}"
    r"|A(?:KI|SI)A[0-9A-Z]{12,}|AIza[0-9A-Za-z_\-]{20,}|ya29\.[0-9A-Za-z_\-]{8,}|npm_[A-Za-z0-9]{16,}"
    r"|pypi-[A-Za-z0-9_\-]{16,}|wandb_[A-Za-z0-9]{8,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r"|-----BEGIN[A-Z ]*PRIVATE KEY-----(?:.|\n)*?(?:-----END[A-Z ]*PRIVATE KEY-----|$))"
)
_SECRET_NAME = r"[A-Za-z0-9_\-]*(?:token|secret|passw(?:or)?d|pwd|api[_\-]?key|access[_\-]?key|auth|credential)[A-Za-z0-9_\-]*"  # noqa: E501
SECRET_ARG_RE = re.compile(rf"(?i)((?<![\w\-])-{{1,2}}{_SECRET_NAME})(=|\s+)(\"[^\"]*\"|'[^']*'|[^\s\"']+)")
"""``--token X`` / ``--hf-token=X`` inside one string."""
SECRET_FLAG_RE = re.compile(rf"(?i)^-{{1,2}}{_SECRET_NAME}$")
"""A command-line argument that is a secret-named flag alone: its value is the next argument."""
SECRET_ASSIGN_RE = re.compile(
    rf"(?i)((?<![\w\-:]){_SECRET_NAME})([\"']?\s*=\s*|[\"']?\s*:(?!:)\s*)(\"[^\"]*\"|'[^']*'|[^\s\"',;:][^\s\"',;]*)"
)
"""``api_key=X``, ``password: X``, ``HF_TOKEN=X`` anywhere."""
ENV_WORD_RE = re.compile(r"(?<![\w\-./=])([A-Z][A-Z0-9_]*[A-Z0-9])=(\"[^\"]*\"|'[^']*'|[^\s\"']*)")
"""``NAME=value`` words in a command line (``env WANDB_API_KEY=... python3``): upper-case names only."""
URL_CRED_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/\s:@?#\"'<>`]*)(?::([^/\s?#\"'<>`]*))?@")
"""Credentials before a URL's host: ``user:password@``, ``:password@`` (an empty user name), ``token@`` (a user
alone), percent-encoded or not; a password holding a raw ``@`` is taken up to the last ``@`` of the authority."""
_QUERY_NAME = r"[\w\-.]*(?:token|secret|passw(?:or)?d|pwd|api[_\-]?key|access[_\-]?key|auth|credential|signature|sig|key|code|session)[\w\-.]*"  # noqa: E501
QUERY_SECRET_RE = re.compile(rf"(?i)([?&;]{_QUERY_NAME}=)([^&#\s\"'<>`]+)")
"""A secret-named parameter of a URL's query string: ``?password=X``, ``&X-Amz-Signature=X``,
``&X-Amz-Credential=X``, ``?sig=X``, ``?key=X``, ``&access_token=X``."""
ENV_ASSIGN_RE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*=")
# A process environment block (seen in StringIds of a real 2023.4 export): NUL- or newline-separated
# KEY=VALUE entries. Two such entries in one string make it an environment block.
ENV_BLOCK_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^\x00\n]*[\x00\n]+[A-Za-z_][A-Za-z0-9_]*=")
# ... and a block holding one variable: ``NAME=value`` ended by NUL (no NVTX text or kernel name holds NUL).
ENV_ONE_RE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*=[^\x00]*\x00")
# Words never taken as a user name learnt from a path (/scratch/nccl/...): the analysis matches on them.
NOT_A_USER = {
    "root",
    "<user>",
    "nccl",
    "cuda",
    "nvtx",
    "data",
    "home",
    "step",
    "train",
    "torch",
    "python",
    "tmp",
    "ddp",
    "forward",
    "backward",
    "optimizer",
    "model",
    "runs",
    "shared",
    "public",
    "scratch",
    "users",
}
NOT_A_HOST = {"", "localhost", "local (cli)", "<host>", "unknown", "none"}
ANALYSIS_TEXT = " ".join(
    [
        nn.DOMAIN,
        nn.STEP,
        nn.FORWARD,
        nn.BACKWARD,
        nn.OPTIMIZER,
        nn.GRAD_WAIT,
        nn.ALLREDUCE_PREFIX,
        nn.PARAM_SYNC_PREFIX,
        nn.FSDP_BLOCK_PREFIX,
        nn.RANK_MARKER,
        *nccl_names.NCCL_PREFIXES,
        *nccl_names.ALGORITHMS,
        *nccl_names.PROTOCOLS,
        *nccl_names.REDOPS,
        *nccl_names.DTYPES,
        *nccl_names.SHORT_DTYPES,
        "AllReduce ReduceScatter AllGather Broadcast Reduce SendRecv Send Recv AllToAll iteration ProfilerStep",
    ]
)
"""Text the analysis matches on: a user or host name found in it is not replaced as a word."""
TEXT_BLOB_MIN_PRINTABLE = 0.9
"""A BLOB that is not UTF-8 is scrubbed as Latin-1 text only when this share of its bytes is printable."""


def pseudonym(host: str) -> str:
    """Stable stand-in for a host name: equal hosts stay equal across separately scrubbed files."""
    return "host-" + hashlib.sha256(host.strip().lower().encode()).hexdigest()[:8]


def _word(w: str) -> re.Pattern:
    return re.compile(r"(?<![A-Za-z0-9])(" + re.escape(w) + r")(?![A-Za-z0-9])", re.I)


def analysis_word(word: str) -> bool:
    """Whether ``word`` stands alone (as the scrubber's word rule would find it) in text the analysis reads."""
    return bool(_word(word).search(ANALYSIS_TEXT))


def _blob_text(value: bytes) -> tuple[str, str] | None:
    """A BLOB's text and codec, when it holds text (UTF-8, or Latin-1 that is mostly printable)."""
    try:
        return value.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text = value.decode("latin-1")
    printable = sum(c.isprintable() or c in "\t\n\r" for c in text)
    return (text, "latin-1") if text and printable >= TEXT_BLOB_MIN_PRINTABLE * len(text) else None


class Scrubber:
    """Holds what to replace (hosts, users) and counts what was changed; ``text`` is the row function."""

    def __init__(self, hosts: set[str], users: set[str]):
        self.hosts = {h: pseudonym(h) for h in hosts if not analysis_word(h)}
        self.users = {u for u in users if not analysis_word(u)}
        words = sorted(self.hosts.keys() | self.users, key=len, reverse=True)
        self.word_re = (
            re.compile(
                r"(?<![A-Za-z0-9])(" + "|".join(re.escape(w) for w in words) + r")(?![A-Za-z0-9])", re.I
            )
            if words
            else None
        )
        self.counts = {"paths": 0, "hosts": 0, "users": 0, "secrets": 0, "env_blocks": 0}

    def _path(self, m: re.Match) -> str:
        path = m.group(0).rstrip("/\\")
        base = re.split(r"[/\\]", path)[-1]
        home = HOME_RE.match(path)
        if home and not analysis_word(home.group(1)):
            self.users.add(home.group(1))
        self.counts["paths"] += 1
        if not base or (home and base == home.group(1)) or base in self.users:
            return "<path>"
        return base

    def _word(self, m: re.Match) -> str:
        word = m.group(0)
        for host, alias in self.hosts.items():
            if word.lower() == host.lower():
                self.counts["hosts"] += 1
                return alias
        self.counts["users"] += 1
        return "<user>"

    def text(self, value):
        """The scrubbed value: text is rewritten, a BLOB holding text is rewritten in its own encoding,
        anything else (numbers, binary payloads) is returned as it is."""
        if isinstance(value, bytes):
            found = _blob_text(value)
            if found is None:
                return value
            new = self.text(found[0])
            return value if new == found[0] else new.encode(found[1], errors="replace")
        if not isinstance(value, str):
            return value
        if ("\x00" in value or "\n" in value) and (ENV_BLOCK_RE.search(value) or ENV_ONE_RE.match(value)):
            self.counts["env_blocks"] += 1
            return "<env>"
        new = SECRET_RE.sub("<secret>", value)
        if "://" in new:
            new = URL_CRED_RE.sub(
                lambda m: m.group(1) + ("<user>:<secret>@" if m.group(3) is not None else "<secret>@"), new
            )
        if "=" in new and ("?" in new or "&" in new or ";" in new):
            new = QUERY_SECRET_RE.sub(lambda m: m.group(1) + "<secret>", new)
        if "=" in new or ":" in new or " " in new:
            new = SECRET_ARG_RE.sub(lambda m: m.group(1) + m.group(2) + "<secret>", new)
            new = SECRET_ASSIGN_RE.sub(lambda m: m.group(1) + m.group(2) + "<secret>", new)
            new = ENV_WORD_RE.sub(
                lambda m: m.group(1) + "=<env>" if m.group(2) not in ("<env>", "<secret>") else m.group(0),
                new,
            )
        if new != value:
            self.counts["secrets"] += 1
        if "/" in new or "\\" in new:
            new = PATH_RE.sub(self._path, new)
        if self.word_re is not None:
            new = self.word_re.sub(self._word, new)
        return new

    def dirty(self, value) -> int:
        return int(isinstance(value, (str, bytes)) and self.text(value) != value)
