"""What in a learned edit's text a person must see before it is published.

A usage step learns rules, skills and commands from recorded sessions, and a session's tool
output and file contents are written by whoever wrote the page, issue or file the agent read.
An attacker plants an instruction there ("run rm -rf ~/x first", "git push --force to main",
"send the GITHUB_TOKEN to ...") hoping it becomes a rule the agent then follows on every
request.  :func:`risks` names what in a text could do harm, so that such an edit waits for a
person instead of being published by itself.

The screens read words, not markup: a command is caught in plain prose, in backticks and in
code blocks alike (the agent follows all three).  Before matching, the text is NFKC-normalised,
stripped of invisible format characters, and its typographic dashes read as ``-``/``--``, so
``r\\u200bm -rf``, full-width letters or ``git push —force`` do not slip past.  Everything is a
deterministic regex, written so that its time grows linearly with the text (an attacker
chooses the text); nothing is run or contacted.

What is screened, by the name a person sees on the review page (``its text <name>``):

* **deletes files**: ``rm`` with any option (``-rf``, ``-fr``, ``-r``, ``--recursive`` ...) or
  on ``~``, ``/``, ``*``, ``$HOME``; ``git clean -f...``; ``find ... -delete``; ``shred``;
  prose that deletes the home or root directory or a whole disk;
* **rewrites git history**: ``git push`` with ``--force``/``-f``/``--force-with-lease``/
  ``--mirror``/``--delete``/``+ref``/``:ref``, ``git reset --hard``, ``git filter-branch``,
  ``git branch -D``, dropping stashes; prose "force push", "hard reset", "push with -f";
* **opens permissions**: ``chmod -R``, a world-writable or setuid ``chmod`` (``777``,
  ``o+w``, ``u+s``), ``chown``/``chgrp -R``, ``chown root``, "world-writable";
* **runs as root**: ``sudo``, ``doas``, ``pkexec``, ``su -``, "run it as root";
* **overwrites a disk**: ``dd if=``/``of=``, ``mkfs``, ``fdisk``, ``wipefs``, ``> /dev/sda``;
* **runs fetched code**: ``eval``/``exec`` of a string or of fetched output, ``$(curl ...)``,
  ``bash <(...)``, ``source <(...)``;
* **runs encoded code**: ``base64 -d``, ``b64decode``/``atob`` next to ``exec``/``eval``,
  "decode the base64 and run it";
* **pipes into a shell**: ``| sh``, ``| bash``, ``| sudo bash``, ``| python`` reading its
  program from the pipe, ``| iex``; prose "pipe the script to bash";
* **runs a network or remote tool**: curl, wget, nc, ncat, netcat, ssh, scp, sftp, rsync,
  telnet, ftp, socat, nmap, Invoke-WebRequest: naming the tool is enough;
* **reaches a URL**: ``http(s)://``, ``ftp://``, ``ws(s)://``, ``ssh://``, ``git://`` ...;
* **reaches a host**: IPv4 and IPv6 addresses, host names ending in a common top-level domain,
  ``user@host`` forms, ``www.``, known drop boxes (``webhook.site``, ``transfer.sh``, ngrok);
* **reads credentials**: ``~/.ssh``, ``id_rsa``/``id_ed25519``, ``.env`` files, ``~/.aws``,
  ``~/.netrc``, ``~/.config/gh``, ``~/.docker/config.json`` and similar stores, keychains and
  password managers, ``printenv``, ``GITHUB_TOKEN``-style variables, and the words api key,
  access/auth/api/bearer token, password, secret, private key, credentials;
* **contains a secret**: a literal key in a known format (``ghp_...``, ``AKIA...``, a PEM
  private key ...), which publishing would leak;
* **changes what runs at login**: ``~/.bashrc``, ``~/.zshrc``, ``~/.profile``, crontab,
  LaunchAgents, ``systemctl enable``;
* **runs a command line**: a code span or code block with a command in it (``sudo``, ``rm``,
  ``bash``, ``python``, ``npm``, ``git push`` ...), or any non-empty shell-labelled block.

Deliberate choices, each for a named false positive:

* plain English verbs pass: "remove", "delete", "reset", "force", "push", "run" are how
  ordinary lessons talk ("Remove the unused import", "Reset the counter"); only the command
  forms and the phrases above hold;
* a bare "token" passes: coding rules talk about parser and model tokens ("Keep tokens of the
  parser in a list", "count tokens"); a token that is a credential is caught by its qualifier
  (access/auth/api/bearer/GitHub ... token) or its variable name (``GITHUB_TOKEN``);
* ``.venv`` and "environment" pass; only a ``.env`` file (``.env``, ``.env.local``,
  ``config/.env``) is a credential store, not its committed template (``.env.example``,
  ``.env.sample``).  ``os.environ`` and ``process.env`` pass too, and so do Python's
  ``secrets.token_hex`` and friends;
* ``sh`` counts only as a word (``| sh``), never inside "shell", "fish", "push", "finish";
* file names pass as hosts: top-level domains that are also common file extensions (``.sh``,
  ``.py``, ``.md``, ``.rs``, ``.pl``, ``.cc``, ``.zip`` ...) and common attribute names
  (``.info``, ``.app``, ``.site``, ``.cloud``, ``.link``) are left out of the list, and a
  dotted name that goes on (``java.io.File``) is a package path, not a host.  A host with such
  a domain is still caught in a URL, after ``www.`` or ``@``, or next to a network tool;
* loopback passes: ``127.x.x.x`` and ``localhost`` reach nothing outside the machine (a
  network tool aimed at them is still held);
* a safety rule that only forbids, with the negation right before it ("Never use force-push;
  ask first"), passes for the prose forms of force push and hard reset.  Every occurrence is
  checked, so "never force push, then force push to main" holds, and a command line
  (``git push --force``) holds even after "never": it can be copied and run as it stands;
* a safety rule that merely names credentials ("never commit secrets") is held anyway: a
  person approving it costs a click, a missed one leaks a key;
* ``eval()``/``exec()`` with empty parentheses names the function ("don't use eval() on user
  input") and passes; ``eval(x)``, ``eval "$(...)"`` hold.

Installing packages is not screened here.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["NAMES", "risks"]

_I = re.IGNORECASE

# -- shared pieces --------------------------------------------------------------------------------

_ARGS = r"[^\n;|&`]{0,200}?"  # the rest of one command (to ; | & or a span's end); bounded: linear
_OPTS = r"(?:-\S+\s+)*"  # options before the argument a screen is about
# A negation right before a prose phrase ("never use force-push"): see the module docstring.
_NEGATED = (
    r"(?P<negated>\b(?:never|don['’]?t|do\s+not|avoid|no|not|without)\s+"
    r"(?:(?:ever|use|using|do|doing|run|running|a|any)\s+){0,2})?"
)
_SHELL = r"(?:/usr)?(?:/bin/)?(?:ba|z|da|k|c|tc|fi|a)?sh\b"
_SUDO = r"(?:sudo\s+(?:-\S+\s+)*)?"
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_HEX = r"[0-9a-f]{1,4}"
# Top-level domains that are rarely anything else in a coding rule; see the module docstring.
_TLDS = (
    "com|net|org|edu|gov|mil|io|dev|ai|co|me|xyz|ru|cn|su|uk|de|fr|jp|nl|eu|biz|onion|ly|tk|"
    "ga|cf|gq|pw|ws|icu|shop|online|club|internal|corp|lan"
)


def _all(*patterns: str, flags: int = _I) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, flags) for p in patterns)


# -- the screens, in the order their names are reported ------------------------------------------

_SCREENS: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = (
    (
        "deletes files",
        _all(
            r"\brm\s+" + _OPTS + r"(?:-[a-z]*[rf][a-z]*|--recursive|--force|--no-preserve-root)(?![\w-])",
            r"\brm\s+" + _OPTS + r"(?:~|/|\*|\$HOME\b|\.\.?(?=[\s/]|$))",
            r"\bgit\s+clean\b" + _ARGS + r"\s(?:-[a-z]*f[a-z]*|--force)(?![\w-])",
            r"\bfind\b" + _ARGS + r"\s-delete\b",
            r"\bshred\b",
            r"\bRemove-Item\b" + _ARGS + r"\s-Recurse\b",
            r"\b(?:rmdir|rd|del)\s+/[sq]\b",
            r"\b(?:delete|wipe|erase|remove|destroy|nuke|clear)\w*\s+(?:out\s+)?"
            r"(?:(?:the|your|my|their|all|of|everything|files|contents|in|under)\s+){0,4}"
            r"(?:home\s+(?:dir\w*|folder)|~(?=[/\s]|$)|\$HOME\b|root\s+(?:dir\w*|folder|file\s*system)"
            r"|(?:whole|entire)\s+(?:disk|drive|file\s*system|machine)|/(?=\s|$))",
        ),
    ),
    (
        "rewrites git history",
        _all(
            r"\bgit\s+push\b" + _ARGS + r"\s(?:--force(?:-with-lease|-if-includes)?|--mirror|--delete"
            r"|--prune|-[a-z]*[fd][a-z]*|\+[\w/.-]+|:[\w/.-]+)(?![\w-])",
            r"\bgit\s+reset\b" + _ARGS + r"\s--hard\b",
            r"\bgit\s+(?:filter-branch|filter-repo)\b",
            r"\bgit\s+branch\b" + _ARGS + r"\s(?-i:-[a-zA-Z]*D)\b",
            r"\bgit\s+(?:reflog\s+expire|update-ref\s+-d|stash\s+(?:clear|drop))\b",
            r"\bgit\s+checkout\b" + _ARGS + r"\s(?:-f|--force)(?![\w-])",
            _NEGATED + r"\bforce[\s-]?push\w*",
            _NEGATED + r"\bhard[\s-]?reset\w*",
            _NEGATED + r"\bpush\w*\s+(?:\S+\s+){0,3}?(?:--force\S*|-f)(?![\w-])",
            _NEGATED + r"\breset\w*\s+(?:\S+\s+){0,4}?(?:--)?hard\b(?!-)",
            _NEGATED + r"\brewrit\w*\s+(?:the\s+)?(?:git\s+)?history\b",
        ),
    ),
    (
        "opens permissions",
        _all(
            r"\bchmod\s+" + _OPTS + r"(?:(?-i:-[a-zA-Z]*R)|--recursive)(?![\w-])",
            r"\bchmod\s+" + _OPTS + r"0?[0-7]?[0-7]{2}[2367](?!\w)",  # others may write
            r"\bchmod\s+" + _OPTS + r"[ugoa]*[oa][ugoa]*[+=][rwxXt]*w",
            r"\bchmod\s+" + _OPTS + r"[ugoa]*[+=][rwxXt]*s",  # setuid / setgid
            r"\bch(?:own|grp)\s+" + _OPTS + r"(?:(?-i:-[a-zA-Z]*R)|--recursive)(?![\w-])",
            r"\bchown\s+" + _OPTS + r"root\b",
            r"\bworld[\s-]?(?:writ\w*|readable)\b",
            r"\b(?:permissions?|mode|perms)\s+(?:to\s+|of\s+)?0?777\b|\b0?777\s+(?:permissions?|mode|perms)\b",
        ),
    ),
    (
        "runs as root",
        _all(
            r"\bsudo(?:ers)?\b(?!-)",  # not "sudo-free"
            r"\b(?:doas|pkexec)\b",
            r"\bsu\s+(?:-(?=\s|$)|-[lc]\b|root\b)",
            r"\b(?:run|execute|log\s*in|login|connect)\w*\s+(?:\S+\s+){0,3}?as\s+(?:the\s+)?"
            r"(?:root|administrator)\b",
        ),
    ),
    (
        "overwrites a disk",
        _all(
            r"\bdd\b" + _ARGS + r"\b(?:if|of)=",
            r"\bmkfs(?:\.\w+)?\b",
            r"\b(?:fdisk|sfdisk|parted|wipefs)\b",
            r">\s*/dev/(?:sd|hd|nvme|xvd|vd|disk|mmcblk)\w*",
            r"\bdiskutil\s+(?:erase\w*|partition\w*|zero\w*)\b",
        ),
    ),
    (
        "runs fetched code",
        _all(
            r"\b(?:eval|exec)\s*(?:\((?!\s*\))|[\"'$`])",
            r"\b(?:eval|exec)\w*\s+(?:the\s+|whatever\s+|any\s+)?"
            r"(?:output|response|result|reply|downloaded|fetched|contents?|payload|returned)\b",
            r"(?:\bsource|(?<![\w.])\.)\s+<\(",
            r"\b(?:ba|z|da|k)?sh\s+<\(",
            r"\$\(\s*(?:curl|wget)\b",
            r"\b(?:(?:ba|z|da|k)?sh|python[\d.]*|node|perl|ruby)\s+-[ce]\s+[\"']?\$\(",
        ),
    ),
    (
        "runs encoded code",
        _all(
            r"\bbase64\s+" + _OPTS + r"(?:(?-i:-[a-zA-Z]*[dD])\b|--decode\b)",
            r"\b(?:b64decode|atob|fromCharCode|unhexlify)\b[^\n]{0,80}?\b(?:exec|eval)\b",
            r"\b(?:exec|eval)\b[^\n]{0,80}?\b(?:b64decode|atob|fromCharCode|unhexlify)\b",
            r"\bbase64\b[^.!?\n]{0,80}?\b(?:and|then)\s+(?:run|execute|exec|eval|pipe)\w*\b",
            r"\b(?:run|execute|exec|eval)\w*\s+(?:the\s+|this\s+|that\s+)?(?:base64[\s-])?decoded\b",
            r"\bopenssl\s+(?:enc\b" + _ARGS + r"\s-d\b|base64\s+-d\b)",
        ),
    ),
    (
        "pipes into a shell",
        _all(
            r"\|\s*" + _SUDO + r"(?:env\s+(?:\S+=\S*\s+)*)?" + _SHELL,
            # an interpreter that reads its program from the pipe (not `| python script.py`)
            r"\|\s*" + _SUDO + r"(?:python[\d.]*|perl|ruby|node|php|pwsh|powershell)\b"
            r"(?!\s+(?:-[mc]\s+)?[^\s|;&-])",
            r"\|\s*(?:iex|invoke-expression)\b",
            r"\bpip(?:e|es|ed|ing)\b[^.!?\n]{0,60}?\b(?:to|into|through|in)\s+(?:a\s+|the\s+)?"
            r"(?:sudo\s+)?(?:(?:ba|z|da|k|fi)?sh|shell|terminal|interpreter|powershell)\b",
        ),
    ),
    (
        "runs a network or remote tool",
        _all(
            r"(?<![\w.-])(?:curl|wget|nc|ncat|netcat|ssh|scp|sftp|rsync|telnet|ftp|socat|nmap|aria2c)(?![\w-])",
            r"\bssh-copy-id\b",
            r"\b(?:Invoke-WebRequest|Invoke-RestMethod|iwr|irm)\b",
        ),
    ),
    (
        "reaches a URL",
        _all(r"\b(?:https?|ftps?|sftp|wss?|ssh|git|s3|gs|smb|rsync|telnet)://"),
    ),
    (
        "reaches a host",
        _all(
            rf"(?<![\w.])(?!127\.){_OCTET}(?:\.{_OCTET}){{3}}(?!\w|\.\d)",
            rf"(?<![\w:.])(?:{_HEX}:){{7}}{_HEX}(?![\w:])",  # full IPv6
            # compressed IPv6 with at least three colons (fe80::1:2, 2001:db8::1; not a[1::2])
            rf"(?<![\w:.])(?=(?:[0-9a-f]*:){{3}})(?:{_HEX}(?::{_HEX})*)?::(?:{_HEX}(?::{_HEX})*)?(?![\w:])",
            rf"(?<![\w.-])(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{_TLDS})(?![\w-]|\.[a-z0-9])",
            r"(?<![\w.+-])[\w.+-]{1,64}@[a-z0-9-]+(?:\.[a-z0-9-]+)*:",  # scp's user@host:path
            r"(?<![\w.+-])[\w.+-]{1,64}@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z][a-z0-9-]*\b",  # user@any.domain
            r"\bwww\.[a-z0-9-]+",
            r"\b(?:webhook\.site|transfer\.sh|interact\.sh|pastebin|ngrok|requestbin|pipedream|"
            r"burpcollaborator)\b",
        ),
    ),
    (
        "reads credentials",
        _all(
            r"(?<![\w-])\.(?:ssh|aws|gnupg|kube|azure|netrc|npmrc|pypirc|pgpass|git-credentials|"
            r"docker/config\.json|config/gh|config/gcloud)\b",
            r"\b_netrc\b",
            r"\bid_(?:rsa|dsa|ecdsa|ed25519)\b",
            r"\bauthorized_keys\b",
            r"\bssh-(?:keygen|add|agent)\b",
            r"(?<![\w.-])\.env(?![\w-]|\.(?:example|sample|template|dist)\b)",
            r"/etc/(?:shadow|gshadow|sudoers)\b",
            r"\bprintenv\b",
            r"/proc/[\w/]*environ\b",
            r"\bkey[\s-]?chains?\b",
            r"\bsecurity\s+(?:find|dump|export)-[\w-]+",
            r"\bsecret-tool\b",
            r"\b(?:gnome-keyring|kwallet\w*|1password|lastpass|bitwarden)\b",
            r"\bop\s+(?:read|item\s+get)\b",
            r"\bgit\s+credential\b",
            r"\b(?:access|auth|authentication|api|bearer|refresh|session|oauth|id|github|gh|gitlab|npm|"
            r"pypi|slack|discord|jwt|personal\s+access|deploy|service\s+account)[\s_-]?tokens?\b",
            r"\bapi[\s_-]?keys?\b",
            r"\b(?:private|secret|ssh|gpg|pgp|signing|deploy|access|master)[\s_-]?keys?\b",
            r"\bpass(?:words?|wd|phrases?|codes?)\b",
            r"\bsecrets?\b(?!\.(?:token_\w+|choice|randbelow|randbits|compare_digest|SystemRandom)\b)",
            r"\bcredentials?\b|\bcreds\b",
            r"\b(?:session|auth|login|browser)\s+cookies?\b",
        )
        + _all(
            # variable names, upper case only: GITHUB_TOKEN, $NPM_TOKEN, AWS_SECRET_ACCESS_KEY
            r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|API_KEY|ACCESS_KEY|"
            r"SECRET_KEY|PRIVATE_KEY|AUTH|CREDENTIALS?)\b",
            r"\$\{?(?:[A-Z0-9_]*_)?(?:TOKEN|SECRET|PASSWORD|API_KEY)\b",
            flags=0,
        ),
    ),
    (
        "contains a secret",
        _all(
            r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
            r"\bgithub_pat_\w{30,}",
            r"\bglpat-[\w-]{20,}",
            r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{24,}",
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"\bnpm_[A-Za-z0-9]{30,}\b",
            r"\bhf_[A-Za-z0-9]{30,}\b",
            r"\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.",  # a JSON web token
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
            flags=0,
        ),
    ),
    (
        "changes what runs at login",
        _all(
            r"(?<![\w.])\.(?:bashrc|bash_profile|bash_login|zshrc|zshenv|zprofile|profile)\b",
            r"\.config/fish/config\.fish\b",
            r"\bcrontab\b",
            r"\bLaunch(?:Agents|Daemons)\b",
            r"\bsystemctl\s+(?:--user\s+)?enable\b",
            r"/etc/(?:rc\.local|profile\b|cron\.\w+)",
        ),
    ),
)

_COMMAND_LINE = "runs a command line"
NAMES: tuple[str, ...] = (*(name for name, _ in _SCREENS), _COMMAND_LINE)

# -- code spans -----------------------------------------------------------------------------------

_FENCE = re.compile(
    r"^[ \t]*+(`{3,}+|~{3,}+)[ \t]*+([\w+-]*+)[^\n]*+\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S
)
_INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_PROMPT = re.compile(r"^[ \t]*\$[ \t]+(\S.*)$", re.M)  # "$ make deploy"
_SHELL_LANGS = frozenset(
    {"sh", "bash", "zsh", "shell", "console", "shell-session", "fish", "ps1", "powershell"}
)
_COMMAND = re.compile(
    r"\b(?:sudo|rm|chmod|chown|eval|exec|bash|sh|zsh|python[\d.]*|node|npx|pip3?|npm|git\s+push|dd|mkfs|"
    r"curl|wget|perl|ruby|pwsh|powershell)\b",
    _I,
)
_INVISIBLE = {"Cf"}  # zero-width spaces and joiners, soft hyphens, bidi controls
# Dashes NFKC keeps: an editor's "—force" or a minus sign in "−rf" reads as an option to the agent.
_DASHES = str.maketrans(
    {"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-", "\u2013": "--", "\u2014": "--"}
)


def _normal(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_DASHES)
    return "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE)


def _runs_a_command_line(text: str) -> bool:
    for fence in _FENCE.finditer(text):
        body = fence.group(3)
        if body.strip() and (fence.group(2).lower() in _SHELL_LANGS or _COMMAND.search(body)):
            return True
    rest = _FENCE.sub("\n", text)
    spans = [m.group(2) for m in _INLINE.finditer(rest)] + [m.group(1) for m in _PROMPT.finditer(rest)]
    return any(_COMMAND.search(span) for span in spans)


def _found(pattern: re.Pattern[str], text: str) -> bool:
    if "negated" not in pattern.groupindex:
        return pattern.search(text) is not None
    return any(match.group("negated") is None for match in pattern.finditer(text))


def risks(text: str) -> list[str]:
    """The names of the risks in ``text``, in :data:`NAMES` order (empty: nothing to show)."""
    text = _normal(text)
    found = [name for name, patterns in _SCREENS if any(_found(p, text) for p in patterns)]
    if _runs_a_command_line(text):
        found.append(_COMMAND_LINE)
    return found
